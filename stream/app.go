package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// App runs handlers over a Transport. Register handlers with Handle,
// Consume and HandleBatch before Run; Run consumes until its context ends
// and then shuts down in this order: stop fetching, let in-flight handlers
// finish (within ShutdownTimeout) and publish their results, commit what
// they acknowledged, close the consumer, and only then close the
// transport, its producer included.
type App struct {
	transport Transport
	cfg       appConfig
	producer  observedProducer

	handlers   map[string]*handler // by topic; written only before Run
	publishers []publisherInfo     // NewPublisher's topics, for the AsyncAPI document
	// deadLetters are the topics of DeadLetter middlewares built on this
	// App's Producer, for the AsyncAPI document; written only before Run.
	deadLetters []string
	errs        []error // registration errors, returned by Run
	started     bool

	// handlerCtx is the parent of every handler's context. It is not the
	// context given to Run: handlers keep running after Run's context
	// ends, until they finish or the shutdown deadline cancels their
	// worker's context (partitionWorker.ctx, derived from this).
	handlerCtx    context.Context
	cancelHandler context.CancelFunc

	mu        sync.Mutex
	workers   map[TopicPartition]*partitionWorker // guarded by mu
	abandoned []*partitionWorker                  // guarded by mu: revoked, still running past their deadline
	consumer  Consumer
}

type appConfig struct {
	group             string
	middlewares       []Middleware
	logger            *slog.Logger
	shutdownTimeout   time.Duration
	onError           func(ctx context.Context, records []*Record, err error)
	observe           func(Event)
	pollRecords       int
	redeliveryBackoff time.Duration
	beforePublish     []func(ctx context.Context, rec *Record)
}

// Option configures an App.
type Option func(*appConfig)

// Group names the consumer group the App's handlers consume in.
func Group(name string) Option { return func(c *appConfig) { c.group = name } }

// Use adds middlewares around every handler, outermost first; a handler's
// own middlewares (WithMiddleware) run inside them.
func Use(mw ...Middleware) Option {
	return func(c *appConfig) { c.middlewares = append(c.middlewares, mw...) }
}

// Logger sets the App's logger (default: discard).
func Logger(l *slog.Logger) Option { return func(c *appConfig) { c.logger = l } }

// ShutdownTimeout bounds how long Run waits, once its context has ended,
// for in-flight handlers to finish (default 10 s). At the deadline their
// context is cancelled, and Run waits as long again; a handler still
// running then is abandoned and Run returns ErrShutdownTimeout without
// closing the transport, because the handler may yet publish; the
// consumer (committing what finished) and the transport are closed when
// the last such handler returns.
func ShutdownTimeout(d time.Duration) Option { return func(c *appConfig) { c.shutdownTimeout = d } }

// OnError sets the error path: it is called with every failure that the
// ack policy does not turn into a redelivery, and with every failure
// before a redelivery too. The default logs it at Error level.
func OnError(fn func(ctx context.Context, records []*Record, err error)) Option {
	return func(c *appConfig) { c.onError = fn }
}

// RedeliveryBackoff is the wait before the first redelivery of a nacked
// message; it doubles for each further redelivery of the same offset, up
// to 64 times the first (default 10 ms). It keeps a failing message from
// spinning a core.
func RedeliveryBackoff(d time.Duration) Option {
	return func(c *appConfig) { c.redeliveryBackoff = d }
}

// BeforePublish calls fn with every record the App's producer is about to
// publish (handler results, Publishers, dead letters) and the publishing
// context: fn may append headers to rec, as trace-context propagation
// does (stream/otelstream). Hooks run in the order given.
func BeforePublish(fn func(ctx context.Context, rec *Record)) Option {
	return func(c *appConfig) { c.beforePublish = append(c.beforePublish, fn) }
}

// ErrShutdownTimeout is returned by Run when handlers did not finish
// within twice ShutdownTimeout.
var ErrShutdownTimeout = errors.New("stream: handlers still running after the shutdown timeout")

// New returns an App over transport.
func New(transport Transport, opts ...Option) *App {
	cfg := appConfig{
		shutdownTimeout:   10 * time.Second,
		pollRecords:       512,
		redeliveryBackoff: 10 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.onError == nil {
		logger := cfg.logger
		cfg.onError = func(ctx context.Context, records []*Record, err error) {
			r := records[0]
			logger.ErrorContext(ctx, "stream: handler failed", "topic", r.Topic,
				"partition", r.Partition, "offset", r.Offset, "records", len(records), "error", err)
		}
	}
	a := &App{
		transport: transport,
		cfg:       cfg,
		handlers:  map[string]*handler{},
		workers:   map[TopicPartition]*partitionWorker{},
	}
	a.producer = observedProducer{inner: transport.Producer(), app: a}
	return a
}

// Producer returns the App's producer: Publish sends a raw record. It is
// usable from anywhere (handlers included) until Run returns. For typed
// values use NewPublisher.
func (a *App) Producer() Producer { return a.producer }

func (a *App) register(h *handler) {
	switch {
	case a.started:
		a.errs = append(a.errs, fmt.Errorf("stream: handler for %q registered after Run", h.topic))
	case a.handlers[h.topic] != nil:
		a.errs = append(a.errs, fmt.Errorf("stream: two handlers for topic %q", h.topic))
	case h.err != nil:
		a.errs = append(a.errs, h.err)
	default:
		a.handlers[h.topic] = h
	}
}

// Run consumes until ctx ends, then shuts down gracefully (see App) and
// returns nil, or the first error that stopped it: a registration error,
// a failure to start consuming, ErrShutdownTimeout, or a failure to commit
// or close. Run may be called once.
func (a *App) Run(ctx context.Context) error {
	if a.started {
		return errors.New("stream: Run called twice")
	}
	a.started = true
	if len(a.errs) > 0 {
		return errors.Join(a.errs...)
	}
	if len(a.handlers) == 0 {
		return errors.New("stream: no handlers registered")
	}
	topics := make([]string, 0, len(a.handlers))
	for t := range a.handlers {
		topics = append(topics, t)
	}
	a.handlerCtx, a.cancelHandler = context.WithCancel(context.WithoutCancel(ctx))
	defer a.cancelHandler()

	consumer, err := a.transport.Consume(ctx, ConsumerConfig{Group: a.cfg.group, Topics: topics, OnRevoked: a.revoke, OnLost: a.lose})
	if err != nil {
		return fmt.Errorf("stream: consume %v: %w", topics, err)
	}
	a.mu.Lock()
	a.consumer = consumer
	a.mu.Unlock()
	a.emit(Event{Kind: EventStarted})

	pollErr := a.poll(ctx, consumer)
	return errors.Join(pollErr, a.shutdown(consumer))
}

// poll is the only caller of consumer.Poll. It hands each record to its
// partition's worker and returns when ctx ends (nil) or the consumer fails.
func (a *App) poll(ctx context.Context, consumer Consumer) error {
	buf := make([]*Record, 0, a.cfg.pollRecords)
	for {
		records, err := consumer.Poll(ctx, buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("stream: poll: %w", err)
		}
		// Each worker is woken once for its run of records, not per
		// record (a poll's records come partition by partition).
		var last *partitionWorker
		for i, r := range records {
			w := a.workerFor(r)
			if w != last && last != nil {
				last.signal()
			}
			w.push(r)
			last = w
			records[i] = nil // the worker owns it now; do not pin it here
		}
		if last != nil {
			last.signal()
		}
		buf = records[:0]
	}
}

func (a *App) workerFor(r *Record) *partitionWorker {
	tp := TopicPartition{Topic: r.Topic, Partition: r.Partition}
	a.mu.Lock()
	w := a.workers[tp]
	if w == nil {
		w = newPartitionWorker(a, a.handlers[r.Topic], tp, a.consumer)
		a.workers[tp] = w
	}
	a.mu.Unlock()
	return w
}

// takeWorkersLocked removes the workers of partitions from the App's map
// and returns them. a.mu is held.
func (a *App) takeWorkersLocked(partitions []TopicPartition) []*partitionWorker {
	var taken []*partitionWorker
	for _, tp := range partitions {
		if w := a.workers[tp]; w != nil {
			delete(a.workers, tp)
			taken = append(taken, w)
		}
	}
	return taken
}

// revoke is the transport's OnRevoked: it stops the partitions' workers,
// which finish their in-flight messages and mark them, before the
// transport commits and lets another member have the partitions.
func (a *App) revoke(partitions []TopicPartition) {
	a.mu.Lock()
	stopping := a.takeWorkersLocked(partitions)
	a.mu.Unlock()
	if !a.stopWorkers(stopping) {
		// Still running past the deadline: once revoke returns the
		// transport commits and the partitions may be another member's,
		// so what these handlers finish from now on is marked nowhere
		// (redelivered to the new owner: at least once). Shutdown must
		// still wait for them before it closes the transport they may
		// publish on.
		for _, w := range stopping {
			w.dropMarks()
		}
		a.mu.Lock()
		a.abandoned = append(a.abandoned, stopping...)
		a.mu.Unlock()
	}
}

// lose is the transport's OnLost: the partitions are another member's
// already, so their workers are dropped, not waited for: they mark nothing
// from now on (what they finish will be redelivered to the new owner from
// its committed offset: at least once), their handlers' context is
// cancelled, and they stop. Shutdown still waits for them, since a handler
// that ignores its context may publish on the transport.
func (a *App) lose(partitions []TopicPartition) {
	a.mu.Lock()
	dropped := a.takeWorkersLocked(partitions)
	a.abandoned = append(a.abandoned, dropped...)
	a.mu.Unlock()
	for _, w := range dropped {
		w.drop()
	}
}

// stopWorkers stops workers and waits for them within the shutdown
// timeout, then cancels the handlers' context and waits as long again.
// It reports whether they all finished.
func (a *App) stopWorkers(workers []*partitionWorker) bool {
	for _, w := range workers {
		w.stop()
	}
	deadline := time.NewTimer(a.cfg.shutdownTimeout)
	defer deadline.Stop()
	cancelled := false
	for i, w := range workers {
		for waiting := true; waiting; {
			select {
			case <-w.done:
				waiting = false
			case <-deadline.C:
				if cancelled {
					return false
				}
				// Only these workers' handlers: a slow revoke must not
				// cancel the partitions the App keeps.
				cancelled = true
				for _, late := range workers[i:] {
					late.cancel()
				}
				deadline.Reset(a.cfg.shutdownTimeout)
			}
		}
	}
	return true
}

func (a *App) shutdown(consumer Consumer) error {
	a.mu.Lock()
	workers := make([]*partitionWorker, 0, len(a.workers)+len(a.abandoned))
	for tp, w := range a.workers {
		workers = append(workers, w)
		delete(a.workers, tp)
	}
	workers = append(workers, a.abandoned...)
	a.abandoned = nil
	a.mu.Unlock()
	if !a.stopWorkers(workers) {
		a.cfg.logger.Error("stream: handlers still running at the shutdown deadline; the transport stays open until they return")
		go func() {
			for _, w := range workers {
				<-w.done
			}
			_ = a.closeTransport(consumer) // nobody is left to hear the error
		}()
		return ErrShutdownTimeout
	}
	return a.closeTransport(consumer)
}

// closeTransport runs once every worker is done: every handler has
// returned and published, what they acknowledged is marked. Closing the
// consumer commits it; the producer closes last.
func (a *App) closeTransport(consumer Consumer) error {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.shutdownTimeout)
	defer cancel()
	errConsumer := consumer.Close(ctx)
	errTransport := a.transport.Close()
	a.emit(Event{Kind: EventStopped})
	return errors.Join(errConsumer, errTransport)
}

func (a *App) emit(e Event) {
	if a.cfg.observe != nil {
		a.cfg.observe(e)
	}
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	EventStarted   EventKind = iota // Run is consuming
	EventHandled                    // a handler returned nil for Records
	EventFailed                     // a handler returned Err for Records
	EventAcked                      // Records were acknowledged (marked for commit)
	EventPublished                  // Records[0] was published by the App's producer
	EventStopped                    // Run has shut down and closed the transport
)

// Event is what an observer (Observe) is told. Records are valid only
// during the call.
type Event struct {
	Kind    EventKind
	Records []*Record
	Err     error
}

// Observe calls fn synchronously for every Event: the hook that streamtest
// and metrics use. fn must be quick and safe for concurrent use.
func Observe(fn func(Event)) Option { return func(c *appConfig) { c.observe = fn } }

// observedProducer tells the observer about every publish.
type observedProducer struct {
	inner Producer
	app   *App
}

func (p observedProducer) Publish(ctx context.Context, rec *Record) error {
	for _, fn := range p.app.cfg.beforePublish {
		fn(ctx, rec)
	}
	if err := p.inner.Publish(ctx, rec); err != nil {
		return err
	}
	if p.app.cfg.observe != nil {
		one := [1]*Record{rec}
		p.app.cfg.observe(Event{Kind: EventPublished, Records: one[:]})
	}
	return nil
}
