package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strconv"
	"time"
)

// PanicError is what Recover turns a handler's panic into.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("stream: handler panicked: %v", e.Value) }

// Recover turns a panic in the handler into a *PanicError, which then
// takes the error path of the handler's ack policy, instead of ending the
// process. Place it outermost (first in Use) to cover the other
// middlewares too.
func Recover() Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, records []*Record) (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = &PanicError{Value: v, Stack: debug.Stack()}
				}
			}()
			return next(ctx, records)
		}
	}
}

// Timeout gives each delivery a deadline of d: the handler's context is
// cancelled when it passes. Go cannot stop a goroutine, so a handler that
// ignores its context runs on; the deadline is its signal, and Timeout
// returns the context's error if the handler returns nil after it.
func Timeout(d time.Duration) Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, records []*Record) error {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			err := next(ctx, records)
			if err == nil && ctx.Err() != nil {
				return fmt.Errorf("stream: handler finished after its %v timeout: %w", d, ctx.Err())
			}
			return err
		}
	}
}

// RetryPolicy bounds Retry. The n-th retry waits
// min(MaxInterval, InitialInterval * Multiplier^(n-1)), less a random
// fraction of up to Jitter of it ("full jitter" when Jitter is 1), so that
// handlers failing together do not retry together.
type RetryPolicy struct {
	MaxAttempts     int           // attempts in all, the first included (default 3)
	InitialInterval time.Duration // default 100 ms
	MaxInterval     time.Duration // default 10 s
	Multiplier      float64       // default 2
	Jitter          float64       // 0..1, default 0.5
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 3
	}
	if p.InitialInterval <= 0 {
		p.InitialInterval = 100 * time.Millisecond
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = 10 * time.Second
	}
	if p.Multiplier < 1 {
		p.Multiplier = 2
	}
	if p.Jitter < 0 || p.Jitter > 1 {
		p.Jitter = 0.5
	}
	return p
}

// delay is the wait before retry number retry (1 for the first retry);
// random gives a number in [0, 1).
func (p RetryPolicy) delay(retry int, random func() float64) time.Duration {
	d := float64(p.InitialInterval)
	for i := 1; i < retry && d < float64(p.MaxInterval); i++ {
		d *= p.Multiplier
	}
	d = min(d, float64(p.MaxInterval))
	return time.Duration(d * (1 - p.Jitter*random()))
}

// PermanentError marks a failure that retrying cannot fix (see Permanent).
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that Retry does not retry it: an invalid message,
// say. errors.Is and errors.As see through it.
func Permanent(err error) error { return &PermanentError{Err: err} }

// Retry runs the handler again, in place and after a backoff, while it
// fails, up to the policy's attempts; the last error goes on to the ack
// policy (or to a DeadLetter outside Retry). Attempt(ctx) counts the
// retries. A *DecodeError is not retried (the bytes will not change), nor
// a Permanent error. The
// partition waits meanwhile: that is what keeps its order.
func Retry(policy RetryPolicy) Middleware {
	p := policy.withDefaults()
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, records []*Record) error {
			d := deliveryOf(ctx)
			for retry := 0; ; retry++ {
				err := next(ctx, records)
				var decodeErr *DecodeError
				var permanent *PermanentError
				if err == nil || retry+1 >= p.MaxAttempts || errors.As(err, &decodeErr) || errors.As(err, &permanent) {
					return err
				}
				wait := time.NewTimer(p.delay(retry+1, rand.Float64))
				select {
				case <-ctx.Done():
					wait.Stop()
					return errors.Join(err, ctx.Err())
				case <-wait.C:
				}
				if d != nil {
					d.attempt++
				}
			}
		}
	}
}

// Headers DeadLetter adds to a dead letter, after the original's own.
const (
	HeaderDeadLetterError     = "stream-dlq-error"
	HeaderDeadLetterAttempts  = "stream-dlq-attempts"
	HeaderDeadLetterTopic     = "stream-dlq-source-topic"
	HeaderDeadLetterPartition = "stream-dlq-source-partition"
	HeaderDeadLetterOffset    = "stream-dlq-source-offset"
)

// DeadLetter publishes each record of a failed delivery to topic with
// producer (app.Producer()) and reports success, so the message is
// acknowledged and the partition moves on. The dead letter carries the
// original key, value (the bytes as received, also when they failed to
// decode) and headers, plus the error, the attempt count and the source
// topic, partition and offset in headers. If publishing the dead letter
// fails, the delivery fails with both errors. Put Retry inside it. With
// the App's own Producer, the App's AsyncAPI document describes topic (a
// send operation, the dead letter's headers).
func DeadLetter(producer Producer, topic string) Middleware {
	if p, ok := producer.(observedProducer); ok && !p.app.started && !slices.Contains(p.app.deadLetters, topic) {
		p.app.deadLetters = append(p.app.deadLetters, topic)
	}
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, records []*Record) error {
			err := next(ctx, records)
			if err == nil {
				return nil
			}
			attempts := strconv.Itoa(max(Attempt(ctx), 1))
			for _, r := range records {
				headers := make([]Header, 0, len(r.Headers)+5)
				headers = append(headers, r.Headers...)
				headers = append(headers,
					Header{Key: HeaderDeadLetterError, Value: []byte(err.Error())},
					Header{Key: HeaderDeadLetterAttempts, Value: []byte(attempts)},
					Header{Key: HeaderDeadLetterTopic, Value: []byte(r.Topic)},
					Header{Key: HeaderDeadLetterPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
					Header{Key: HeaderDeadLetterOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
				)
				letter := Record{Topic: topic, Partition: AnyPartition, Key: r.Key, Value: r.Value, Headers: headers, Timestamp: r.Timestamp}
				if perr := producer.Publish(ctx, &letter); perr != nil {
					return errors.Join(err, fmt.Errorf("stream: dead letter to %s: %w", topic, perr))
				}
			}
			return nil
		}
	}
}

// Logging logs every delivery with logger: at Debug when it succeeds, at
// Warn with the error when it fails, with topic, partition, offset, the
// number of records, the attempt and the duration.
func Logging(logger *slog.Logger) Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, records []*Record) error {
			start := time.Now()
			err := next(ctx, records)
			level := slog.LevelDebug
			if err != nil {
				level = slog.LevelWarn
			}
			if !logger.Enabled(ctx, level) {
				return err
			}
			r := records[0]
			attrs := []slog.Attr{
				slog.String("topic", r.Topic), slog.Int("partition", int(r.Partition)),
				slog.Int64("offset", r.Offset), slog.Int("records", len(records)),
				slog.Int("attempt", Attempt(ctx)), slog.Duration("duration", time.Since(start)),
			}
			if err != nil {
				attrs = append(attrs, slog.String("error", err.Error()))
				logger.LogAttrs(ctx, level, "stream: delivery failed", attrs...)
			} else {
				logger.LogAttrs(ctx, level, "stream: delivered", attrs...)
			}
			return err
		}
	}
}
