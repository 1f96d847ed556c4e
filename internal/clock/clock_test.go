package clock

import (
	"sync"
	"testing"
	"time"
)

var (
	_ Clock = Real{}
	_ Clock = (*Manual)(nil)
)

func TestManual(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		do   func(*Manual)
		want time.Time
	}{
		{"start", func(*Manual) {}, start},
		{"advance", func(m *Manual) { m.Advance(1500 * time.Millisecond) }, start.Add(1500 * time.Millisecond)},
		{"advance twice", func(m *Manual) { m.Advance(time.Second); m.Advance(time.Minute) }, start.Add(61 * time.Second)},
		{"backward", func(m *Manual) { m.Advance(-time.Hour) }, start.Add(-time.Hour)},
		{"set", func(m *Manual) { m.Advance(time.Hour); m.Set(start.Add(time.Second)) }, start.Add(time.Second)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := NewManual(start)
			tt.do(m)
			if got := m.Now(); !got.Equal(tt.want) {
				t.Fatalf("Now() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestManualConcurrent(t *testing.T) {
	start := time.Unix(0, 0)
	m := NewManual(start)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				m.Advance(time.Millisecond)
				_ = m.Now()
			}
		}()
	}
	wg.Wait()
	if got, want := m.Now(), start.Add(800*time.Millisecond); !got.Equal(want) {
		t.Fatalf("Now() = %v, want %v", got, want)
	}
}

func TestReal(t *testing.T) {
	before := time.Now()
	got := Real{}.Now()
	if got.Before(before) || got.Sub(before) > time.Minute {
		t.Fatalf("Real.Now() = %v, not close to %v", got, before)
	}
}
