package sasl

import (
	"context"
	"syscall"
	"testing"
	"time"

	ksasl "github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	kscram "github.com/twmb/franz-go/pkg/sasl/scram"
)

// BenchmarkExchange is one whole authentication in process, client
// (franz-go) and server (this package) together, at DefaultIterations.
// For SCRAM the client derives the salted password (PBKDF2) and the server
// only HMACs; for PLAIN the server derives it (see BenchmarkPBKDF2).
func BenchmarkExchange(b *testing.B) {
	s, err := NewServer(benchStore(b), nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []ksasl.Mechanism{
		plain.Auth{User: "alice", Pass: "alice-secret"}.AsMechanism(),
		kscram.Auth{User: "alice", Pass: "alice-secret"}.AsSha256Mechanism(),
		kscram.Auth{User: "alice", Pass: "alice-secret"}.AsSha512Mechanism(),
	} {
		b.Run(m.Name(), func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				e := s.NewExchange()
				if err := e.Handshake(m.Name()); err != nil {
					b.Fatal(err)
				}
				sess, msg, _ := m.Authenticate(context.Background(), "broker")
				for {
					challenge, done, err := e.Step(msg)
					if err != nil {
						b.Fatal(err)
					}
					_, next, err := sess.Challenge(challenge)
					if err != nil {
						b.Fatal(err)
					}
					if done {
						break
					}
					msg = next
				}
			}
		})
	}
}

// BenchmarkPBKDF2 is Hi(password, salt, 4096): the work of a SCRAM
// client per handshake and of the server per PLAIN authentication.
func BenchmarkPBKDF2(b *testing.B) {
	salt := make([]byte, SaltBytes)
	for _, m := range ScramMechanisms {
		b.Run(m.String(), func(b *testing.B) {
			defer reportCPU(b)()
			for b.Loop() {
				SaltedPassword(m, "alice-secret", salt, DefaultIterations)
			}
		})
	}
}

// reportCPU reports the process's CPU time per operation (user + system,
// from getrusage), which a loaded machine inflates less than ns/op: time
// spent waiting for a CPU is not in it.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() { b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op") }
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchStore(b *testing.B) mapStore {
	st := mapStore{"alice": {}}
	for _, m := range ScramMechanisms {
		c, err := NewCredential(m, "alice-secret", DefaultIterations)
		if err != nil {
			b.Fatal(err)
		}
		st["alice"][m] = c
	}
	return st
}
