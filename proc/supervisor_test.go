package proc

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden traces in testdata/ instead of comparing")

// worker is a supervised child: "crash" fails it, "stop" ends it normally.
type worker struct{ id string }

func (w *worker) Receive(ctx *Context, m any) error {
	switch m {
	case "crash":
		return errors.New("crash of " + w.id)
	case "stop":
		ctx.Stop()
	}
	return nil
}

func workerSpec(id string, restart RestartType) ChildSpec {
	return ChildSpec{ID: id, Name: id, Restart: restart, Start: func(any) Behaviour { return &worker{id: id} }}
}

// scenario is a supervision script run in deterministic mode: each step
// sends a message to a named process, or moves virtual time, and lets the
// runtime run until idle. Its journal is the golden trace.
type scenario struct {
	t  *testing.T
	rt *Runtime
	j  bytes.Buffer
}

func newScenario(t *testing.T) *scenario {
	sc := &scenario{t: t}
	sc.rt = mustNew(t, Options{Deterministic: true, Seed: 1, Journal: &sc.j})
	return sc
}

func (sc *scenario) note(format string) { sc.j.WriteString("# " + format + "\n") }

func (sc *scenario) send(name string, m any) {
	sc.t.Helper()
	sc.note("send " + name + " " + m.(string))
	if err := sc.rt.SendName(name, m); err != nil {
		sc.t.Fatalf("send %s %v: %v", name, m, err)
	}
	sc.run()
}

func (sc *scenario) run() {
	sc.t.Helper()
	if err := sc.rt.RunUntilIdle(); err != nil {
		sc.t.Fatal(err)
	}
}

// advance moves virtual time with nothing ready (a test-only lever; a
// program moves it with timers).
func (sc *scenario) advance(d time.Duration) {
	sc.note("advance " + d.String())
	sc.rt.shards[0].virtualNanos += int64(d)
}

func (sc *scenario) pid(name string) PID {
	sc.t.Helper()
	pid, ok := sc.rt.Lookup(name)
	if !ok {
		sc.t.Fatalf("no process named %s", name)
	}
	return pid
}

func (sc *scenario) golden() {
	sc.t.Helper()
	path := filepath.Join("testdata", "supervisor", strings.ReplaceAll(sc.t.Name(), "/", "_")+".txt")
	if *rewrite {
		if err := os.WriteFile(path, sc.j.Bytes(), 0o644); err != nil {
			sc.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		sc.t.Fatalf("%v (run with -rewrite to create it)", err)
	}
	if !bytes.Equal(sc.j.Bytes(), want) {
		sc.t.Fatalf("trace differs from %s (-rewrite regenerates it)\n--- got\n%s--- want\n%s", path, sc.j.Bytes(), want)
	}
}

func (sc *scenario) spawnSupervisor(name string, spec SupervisorSpec) PID {
	sc.t.Helper()
	return mustSpawn(sc.t, sc.rt, name, NewSupervisor(spec), SpawnOptions{})
}

func TestSupervisorOneForOne(t *testing.T) {
	sc := newScenario(t)
	sc.spawnSupervisor("sup", SupervisorSpec{Strategy: OneForOne, Intensity: 2, Period: time.Minute,
		Children: []ChildSpec{workerSpec("a", Permanent), workerSpec("b", Permanent), workerSpec("c", Permanent)}})
	a, b, c := sc.pid("a"), sc.pid("b"), sc.pid("c")
	sc.send("b", "crash")
	if sc.pid("a") != a || sc.pid("c") != c || sc.pid("b") == b {
		t.Fatal("one_for_one must restart b alone")
	}
	sc.send("b", "crash")
	sc.send("b", "crash") // third restart within the minute: more than 2
	if sc.rt.Stats().Live != 0 {
		t.Fatalf("%d processes alive after escalation, want 0", sc.rt.Stats().Live)
	}
	sc.golden()
}

func TestSupervisorOneForAll(t *testing.T) {
	sc := newScenario(t)
	sc.spawnSupervisor("sup", SupervisorSpec{Strategy: OneForAll, Intensity: 1, Period: time.Minute,
		Children: []ChildSpec{workerSpec("a", Permanent), workerSpec("b", Permanent), workerSpec("t", Temporary)}})
	a, b := sc.pid("a"), sc.pid("b")
	sc.send("b", "crash")
	if sc.pid("a") == a || sc.pid("b") == b {
		t.Fatal("one_for_all must restart every child")
	}
	if _, ok := sc.rt.Lookup("t"); ok {
		t.Fatal("a temporary child is not restarted by one_for_all")
	}
	sc.golden()
}

func TestSupervisorRestForOne(t *testing.T) {
	sc := newScenario(t)
	sc.spawnSupervisor("sup", SupervisorSpec{Strategy: RestForOne, Intensity: 1, Period: time.Minute,
		Children: []ChildSpec{workerSpec("a", Permanent), workerSpec("b", Permanent), workerSpec("c", Permanent)}})
	a, b, c := sc.pid("a"), sc.pid("b"), sc.pid("c")
	sc.send("b", "crash")
	if sc.pid("a") != a || sc.pid("b") == b || sc.pid("c") == c {
		t.Fatal("rest_for_one must restart b and c, not a")
	}
	sc.golden()
}

func TestSupervisorRestartTypes(t *testing.T) {
	sc := newScenario(t)
	sc.spawnSupervisor("sup", SupervisorSpec{Strategy: OneForOne, Intensity: 10, Period: time.Minute,
		Children: []ChildSpec{workerSpec("perm", Permanent), workerSpec("trans", Transient), workerSpec("temp", Temporary)}})
	sc.send("perm", "stop")   // permanent: restarted even after a normal exit
	sc.send("trans", "crash") // transient, abnormal: restarted
	sc.send("trans", "stop")  // transient, normal: left stopped
	sc.send("temp", "crash")  // temporary: forgotten
	for name, want := range map[string]bool{"perm": true, "trans": false, "temp": false} {
		if _, ok := sc.rt.Lookup(name); ok != want {
			t.Fatalf("%s alive = %v, want %v", name, ok, want)
		}
	}
	sc.golden()
}

func TestSupervisorIntensityPeriod(t *testing.T) {
	sc := newScenario(t)
	sc.spawnSupervisor("sup", SupervisorSpec{Strategy: OneForOne, Intensity: 1, Period: 10 * time.Second,
		Children: []ChildSpec{workerSpec("a", Permanent)}})
	sc.send("a", "crash")
	sc.advance(11 * time.Second) // the first restart leaves the period
	sc.send("a", "crash")        // one restart in the last 10s: allowed
	if _, ok := sc.rt.Lookup("sup"); !ok {
		t.Fatal("restarts spread beyond the period must not escalate")
	}
	sc.advance(5 * time.Second)
	sc.send("a", "crash") // two within 10s: escalate
	if _, ok := sc.rt.Lookup("sup"); ok {
		t.Fatal("two restarts within the period with intensity 1 must escalate")
	}
	sc.golden()
}

func TestSupervisorEscalation(t *testing.T) {
	sc := newScenario(t)
	inner := SupervisorSpec{Strategy: OneForOne, Intensity: 1, Period: time.Minute, Children: []ChildSpec{workerSpec("w", Permanent)}}
	sc.spawnSupervisor("root", SupervisorSpec{Strategy: OneForOne, Intensity: 3, Period: time.Minute, Children: []ChildSpec{
		{ID: "inner", Name: "inner", Restart: Permanent, Start: func(any) Behaviour { return NewSupervisor(inner) }},
		workerSpec("sibling", Permanent),
	}})
	innerPID, sibling := sc.pid("inner"), sc.pid("sibling")
	sc.send("w", "crash") // inner restarts w
	sc.send("w", "crash") // inner exceeds its intensity, fails upwards; root restarts inner (and a fresh w)
	if sc.pid("inner") == innerPID || sc.pid("sibling") != sibling {
		t.Fatal("root must restart the inner supervisor and leave the sibling alone")
	}
	sc.golden()
}

func TestSupervisorSimpleOneForOne(t *testing.T) {
	sc := newScenario(t)
	sup := sc.spawnSupervisor("pool", SupervisorSpec{Strategy: SimpleOneForOne, Intensity: 5, Period: time.Minute,
		Children: []ChildSpec{{ID: "conn", Restart: Transient, Start: func(arg any) Behaviour { return &worker{id: arg.(string)} }}}})
	var answers []ChildStarted
	client := mustSpawn(t, sc.rt, "client", BehaviourFunc(func(ctx *Context, m any) error {
		switch m := m.(type) {
		case string:
			return ctx.Send(sup, StartChild{Arg: m})
		case ChildStarted:
			answers = append(answers, m)
		}
		return nil
	}), SpawnOptions{})
	for _, arg := range []string{"x", "y"} {
		_ = sc.rt.Send(client, arg)
	}
	sc.run()
	if len(answers) != 2 || answers[0].Err != nil || answers[1].Err != nil {
		t.Fatalf("answers %+v", answers)
	}
	x, y := answers[0].PID, answers[1].PID
	_ = sc.rt.Send(x, "crash") // transient, abnormal: restarted with its argument
	sc.run()
	_ = sc.rt.Send(y, "stop") // transient, normal: removed
	sc.run()
	_ = sc.rt.Send(sup, TerminateChild{PID: x}) // the old x is gone: nothing happens
	sc.run()
	if got := sc.rt.Stats().Live; got != 3 { // pool, client, restarted x
		t.Fatalf("%d live, want 3", got)
	}
	var children Children
	asker := mustSpawn(t, sc.rt, "", BehaviourFunc(func(ctx *Context, m any) error {
		if c, ok := m.(Children); ok {
			children = c
			return nil
		}
		return ctx.Send(sup, WhichChildren{})
	}), SpawnOptions{})
	_ = sc.rt.Send(asker, "ask")
	sc.run()
	if len(children) != 1 || children[0].ID != "conn" || children[0].PID.IsZero() || children[0].PID == x {
		t.Fatalf("which_children: %+v", children)
	}
	sc.golden()
}

func TestSupervisorBadSpecFailsSpawn(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	_, err := rt.Spawn("", NewSupervisor(SupervisorSpec{Strategy: SimpleOneForOne}), SpawnOptions{})
	if !errors.Is(err, ErrBadOptions) {
		t.Fatalf("spawn of a simple_one_for_one without a template: %v", err)
	}
	failing := ChildSpec{ID: "f", Start: func(any) Behaviour { return initFails{} }}
	_, err = rt.Spawn("sup", NewSupervisor(SupervisorSpec{Children: []ChildSpec{workerSpec("a", Permanent), failing}}), SpawnOptions{})
	if err == nil || err.Error() != "init refused" {
		t.Fatalf("spawn with a failing child: %v", err)
	}
	if rt.Stats().Live != 0 {
		t.Fatal("started children survive their supervisor's failed init")
	}
}

type initFails struct{}

func (initFails) Init(*Context) error         { return errors.New("init refused") }
func (initFails) Receive(*Context, any) error { return nil }
func (initFails) Terminate(*Context, error)   {}

// flakyStart fails to start while *failures > 0, counting down.
type flakyStart struct{ failures *int }

func (f flakyStart) Init(*Context) error {
	if *f.failures > 0 {
		*f.failures--
		return errors.New("not ready")
	}
	return nil
}

func (f flakyStart) Receive(ctx *Context, m any) error {
	if m == "crash" {
		return errors.New("crash")
	}
	return nil
}

// TestSupervisorRestartRetry: a child that fails to start on restart is
// tried again (OTP's try_again_restart), each try counting against the
// intensity; one that never starts ends in escalation.
func TestSupervisorRestartRetry(t *testing.T) {
	sc := newScenario(t)
	failures := 0
	sc.spawnSupervisor("sup", SupervisorSpec{Strategy: OneForOne, Intensity: 3, Period: time.Minute,
		Children: []ChildSpec{{ID: "flaky", Name: "flaky", Restart: Permanent, Start: func(any) Behaviour { return flakyStart{&failures} }}}})
	failures = 2 // the next two starts fail
	sc.send("flaky", "crash")
	if _, ok := sc.rt.Lookup("flaky"); !ok {
		t.Fatal("flaky was not restarted after two failed starts")
	}
	failures = 100 // now it never starts: the retries use up the intensity
	sc.send("flaky", "crash")
	if _, ok := sc.rt.Lookup("sup"); ok {
		t.Fatal("a child that never starts must make the supervisor escalate")
	}
	sc.golden()
}
