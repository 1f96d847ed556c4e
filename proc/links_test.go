package proc

import (
	"errors"
	"fmt"
	"testing"
)

// recorder keeps every message it receives; "crash" fails it, "stop" ends
// it, a func is run with the context.
type recorder struct{ got []string }

func (r *recorder) Receive(ctx *Context, m any) error {
	switch m := m.(type) {
	case func(*Context):
		m(ctx)
		return nil
	case string:
		if m == "crash" {
			return errors.New("crashed")
		}
		if m == "stop" {
			ctx.Stop()
		}
	}
	r.got = append(r.got, fmt.Sprint(m))
	return nil
}

func TestLinks(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	victim, trapper, bystander := &recorder{}, &recorder{}, &recorder{}
	v := mustSpawn(t, rt, "victim", victim, SpawnOptions{})
	tr := mustSpawn(t, rt, "trapper", trapper, SpawnOptions{TrapExit: true})
	by := mustSpawn(t, rt, "bystander", bystander, SpawnOptions{})
	crasher := mustSpawn(t, rt, "crasher", &recorder{}, SpawnOptions{})
	normal := mustSpawn(t, rt, "normal", &recorder{}, SpawnOptions{})
	link := func(from PID, to ...PID) {
		_ = rt.Send(from, func(ctx *Context) {
			for _, p := range to {
				ctx.Link(p)
			}
		})
	}
	link(crasher, v, tr)
	link(normal, by, tr)
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	_ = rt.Send(normal, "stop")
	_ = rt.Send(crasher, "crash")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if rt.Alive(v) {
		t.Fatal("a non-trapping process linked to a crashed one must exit")
	}
	if !rt.Alive(by) {
		t.Fatal("a normal exit must not take linked processes along")
	}
	if !rt.Alive(tr) {
		t.Fatal("a trapping process must survive")
	}
	want := fmt.Sprint([]string{Exit{From: normal}.String(), Exit{From: crasher, Reason: errors.New("crashed")}.String()})
	if got := fmt.Sprint(trapper.got); got != want {
		t.Fatalf("trapper got %s, want %s", got, want)
	}
}

func TestLinkToDeadProcess(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	gone := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	rt.Kill(gone, nil)
	trapper := &recorder{}
	tr := mustSpawn(t, rt, "", trapper, SpawnOptions{TrapExit: true})
	plain := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	for _, p := range []PID{tr, plain} {
		_ = rt.Send(p, func(ctx *Context) { ctx.Link(gone) })
	}
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if rt.Alive(plain) {
		t.Fatal("linking to a dead process must deliver noproc, which ends a non-trapping linker")
	}
	if want := fmt.Sprint([]string{Exit{From: gone, Reason: ErrNoProcess}.String()}); fmt.Sprint(trapper.got) != want {
		t.Fatalf("trapper got %v, want %s", trapper.got, want)
	}
}

func TestUnlinkStopsPropagation(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	a := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	b := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	_ = rt.Send(a, func(ctx *Context) { ctx.Link(b); ctx.Unlink(b) })
	_ = rt.Send(a, "crash")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if !rt.Alive(b) {
		t.Fatal("an unlinked process was taken along")
	}
}

func TestMonitors(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	watcher := &recorder{}
	w := mustSpawn(t, rt, "", watcher, SpawnOptions{})
	target := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	quiet := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	dead := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	rt.Kill(dead, nil)
	var refs []MonitorRef
	_ = rt.Send(w, func(ctx *Context) {
		refs = append(refs, ctx.Monitor(target), ctx.Monitor(dead))
		dropped := ctx.Monitor(quiet)
		ctx.Demonitor(quiet, dropped)
	})
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	_ = rt.Send(target, "crash")
	_ = rt.Send(quiet, "crash")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprint([]string{
		Down{Ref: refs[1], PID: dead, Reason: ErrNoProcess}.String(),
		Down{Ref: refs[0], PID: target, Reason: errors.New("crashed")}.String(),
	})
	if got := fmt.Sprint(watcher.got); got != want {
		t.Fatalf("watcher got %s, want %s", got, want)
	}
	if !rt.Alive(w) {
		t.Fatal("a monitor must not take the watcher along")
	}
}

func TestExitSignal(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	trapper := &recorder{}
	tr := mustSpawn(t, rt, "", trapper, SpawnOptions{TrapExit: true})
	plain := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	sender := mustSpawn(t, rt, "", &recorder{}, SpawnOptions{})
	_ = rt.Send(sender, func(ctx *Context) {
		ctx.Exit(tr, ErrShutdown)
		ctx.Exit(plain, nil) // a normal exit signal is ignored by a non-trapping process
	})
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	if !rt.Alive(plain) || !rt.Alive(tr) || len(trapper.got) != 1 {
		t.Fatalf("plain alive %v, trapper alive %v got %v", rt.Alive(plain), rt.Alive(tr), trapper.got)
	}
	rt.Kill(tr, nil) // Kill is not trappable
	if rt.Alive(tr) {
		t.Fatal("Kill did not end a trapping process")
	}
}

// lifecycle records Init and Terminate; Init spawns a linked child.
type lifecycle struct {
	events *[]string
	name   string
	child  bool
}

func (l *lifecycle) Init(ctx *Context) error {
	*l.events = append(*l.events, "init "+l.name)
	if l.child {
		_, err := ctx.Spawn(l.name+"/child", &lifecycle{events: l.events, name: l.name + "/child"}, SpawnOptions{Link: true})
		return err
	}
	return nil
}

func (l *lifecycle) Receive(ctx *Context, m any) error { return errors.New("fail " + l.name) }

func (l *lifecycle) Terminate(ctx *Context, reason error) {
	*l.events = append(*l.events, "terminate "+l.name+": "+reasonText(reason))
}

func TestInitAndTerminate(t *testing.T) {
	rt := mustNew(t, Options{Deterministic: true})
	var events []string
	parent := mustSpawn(t, rt, "p", &lifecycle{events: &events, name: "p", child: true}, SpawnOptions{})
	if _, ok := rt.Lookup("p/child"); !ok {
		t.Fatal("Init's child is not running when Spawn returns")
	}
	_ = rt.Send(parent, "x")
	if err := rt.RunUntilIdle(); err != nil {
		t.Fatal(err)
	}
	want := "[init p init p/child terminate p: fail p terminate p/child: fail p]"
	if fmt.Sprint(events) != want {
		t.Fatalf("events %v\nwant %s", events, want)
	}
}
