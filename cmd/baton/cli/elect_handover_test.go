package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/integration/etcdtest"
)

// A preferred-strategy baton elect asked by a better candidate to end its
// term passes the request to its command and hands over when the command
// exits, long before the candidate's hand-over deadline would preempt it.
// Without a command it resigns at once.
func TestElectPreferredHandsOverWhenABetterCandidateAsks(t *testing.T) {
	ctx := etcdtest.Context(t, 90*time.Second)
	const ns = "elect-handover"
	const deadline = 40 * time.Second
	cli := srv.Client(t)
	for _, child := range [][]string{{"--", "sleep", "1000"}, nil} {
		name := "sched-bare"
		if child != nil {
			name = "sched-child"
		}
		var out, errOut syncBuffer
		done := make(chan int, 1)
		args := append([]string{"elect", "--strategy", "preferred", name, "host-a"}, child...)
		go func() { done <- runTo(ctx, ns, &out, &errOut, args...) }()
		waitFor(t, func() bool { return strings.Contains(errOut.String(), "token") })

		b, err := election.New(cli, name, election.WithNamespace(ns), election.WithStrategy(election.Preferred),
			election.WithPriority(10), election.WithHandoverDeadline(deadline))
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, deadline/2)
		term, err := b.Campaign(cctx, "host-b")
		cancel()
		if err != nil {
			t.Fatalf("%s: the better candidate did not lead within %v (its hand-over deadline is %v): %v\nbaton elect said:\n%s",
				name, deadline/2, deadline, err, errOut.String())
		}
		took := time.Since(start)
		want := ExitOK
		if child != nil {
			want = 128 + 15 // the command's SIGTERM
		}
		select {
		case code := <-done:
			if code != want {
				t.Fatalf("%s: baton elect exited %d, want %d:\n%s", name, code, want, errOut.String())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: baton elect did not exit after handing over:\n%s", name, errOut.String())
		}
		if s := errOut.String(); !strings.Contains(s, "a better candidate asks to lead") {
			t.Fatalf("%s: baton elect did not say why it ends its term:\n%s", name, s)
		}
		t.Logf("%s: the better candidate led %v after it joined (deadline %v)", name, took.Round(time.Millisecond), deadline)
		_ = term.Resign(ctx)
	}
}

// baton resign --to asks a baton elect leader, which hands over to exactly
// that candidate, not to the best one.
func TestElectHandsOverToTheCandidateResignToNames(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	const ns = "elect-resign-to"
	cli := srv.Client(t)
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- runTo(ctx, ns, &out, &errOut, "elect", "--strategy", "preferred", "sched", "host-a") }()
	waitFor(t, func() bool { return strings.Contains(errOut.String(), "token") })
	opts := []election.Option{election.WithNamespace(ns), election.WithStrategy(election.Preferred)}
	best, _ := election.New(cli, "sched", opts...)
	defer best.Close()
	worst, _ := election.New(cli, "sched", append(opts, election.WithPriority(-1))...)
	defer worst.Close()
	won := make(chan string, 2)
	for _, x := range []struct {
		e *election.Election
		v string
	}{{best, "host-best"}, {worst, "host-worst"}} {
		go func() {
			if term, err := x.e.Campaign(ctx, x.v); err == nil {
				won <- term.Value()
			}
		}()
	}
	wkey := candidateKey(ctx, t, best, "host-worst")
	candidateKey(ctx, t, best, "host-best")
	if code, rout, rerr := run(ctx, t, ns, "resign", "sched", "--to", wkey, "--deadline", "10s"); code != ExitOK {
		t.Fatalf("resign --to: exit %d\n%s%s", code, rout, rerr)
	}
	if v := <-won; v != "host-worst" {
		t.Fatalf("%s leads after resign --to named host-worst:\n%s", v, errOut.String())
	}
	if code := <-done; code != ExitOK {
		t.Fatalf("baton elect exited %d:\n%s", code, errOut.String())
	}
}
