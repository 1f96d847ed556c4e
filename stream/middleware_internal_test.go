package stream

import (
	"testing"
	"time"
)

func TestRetryDelayGrowsAndIsJittered(t *testing.T) {
	p := RetryPolicy{InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2, Jitter: 0.5, MaxAttempts: 10}
	none := func() float64 { return 0 }
	most := func() float64 { return 0.999999 }
	for retry, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 30: time.Second} {
		if got := p.delay(retry, none); got != want {
			t.Errorf("retry %d without jitter: %v, want %v", retry, got, want)
		}
		if got := p.delay(retry, most); got < want/2 || got > want/2+time.Millisecond {
			t.Errorf("retry %d with the most jitter: %v, want about %v", retry, got, want/2)
		}
	}
}
