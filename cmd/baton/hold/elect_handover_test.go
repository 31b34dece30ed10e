package hold_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
)

// A preferred-strategy baton elect asked by a better candidate to end its
// term passes the request to its command and hands over when the command
// exits (without a command, at once), long before the candidate's
// hand-over deadline would preempt it; then it campaigns again, and leads
// again once the better candidate resigns. With --once it exits 79.
func TestElectPreferredHandsOverWhenABetterCandidateAsks(t *testing.T) {
	ctx := etcdtest.Context(t, 90*time.Second)
	const ns = "elect-handover"
	const deadline = 40 * time.Second
	cli := clitest.Srv.Client(t)
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"sched-child", []string{"--", "sleep", "1000"}},
		{"sched-bare", nil},
		{"sched-once", []string{"--once", "--", "sleep", "1000"}},
	} {
		var out, errOut clitest.SyncBuffer
		done := make(chan int, 1)
		ectx, stop := context.WithCancel(ctx)
		defer stop()
		once := len(tc.extra) > 0 && tc.extra[0] == "--once"
		args := []string{"elect", "--strategy", "preferred"}
		if once {
			args = append(args, "--once")
			tc.extra = tc.extra[1:]
		}
		args = append(append(args, tc.name, "host-a"), tc.extra...)
		go func() { done <- clitest.RunTo(ectx, ns, &out, &errOut, args...) }()
		clitest.WaitFor(t, func() bool { return strings.Count(errOut.String(), "leading election") == 1 })

		b, err := election.New(cli, tc.name, election.WithNamespace(ns), election.WithStrategy(election.Preferred),
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
				tc.name, deadline/2, deadline, err, errOut.String())
		}
		took := time.Since(start)
		if s := errOut.String(); !strings.Contains(s, "a better candidate asks to lead") {
			t.Fatalf("%s: baton elect did not say why it ends its term:\n%s", tc.name, s)
		}
		t.Logf("%s: the better candidate led %v after it joined (deadline %v)", tc.name, took.Round(time.Millisecond), deadline)
		if once {
			select {
			case code := <-done:
				if code != cmdutil.ExitOwnershipLost {
					t.Fatalf("%s: baton elect --once exited %d after handing over, want %d:\n%s", tc.name, code, cmdutil.ExitOwnershipLost, errOut.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: baton elect --once did not exit after handing over:\n%s", tc.name, errOut.String())
			}
			_ = term.Resign(ctx)
			continue
		}
		// It is a candidate again: it leads once the better one resigns.
		if err := term.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		clitest.WaitFor(t, func() bool { return strings.Count(errOut.String(), "leading election") == 2 })
		stop()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: baton elect did not stop:\n%s", tc.name, errOut.String())
		}
	}
}

// baton resign --to asks a baton elect leader, which hands over to exactly
// that candidate, not to the best one.
func TestElectHandsOverToTheCandidateResignToNames(t *testing.T) {
	ctx := etcdtest.Context(t, 60*time.Second)
	const ns = "elect-resign-to"
	cli := clitest.Srv.Client(t)
	var out, errOut clitest.SyncBuffer
	done := make(chan int, 1)
	ectx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		done <- clitest.RunTo(ectx, ns, &out, &errOut, "elect", "--strategy", "preferred", "sched", "host-a")
	}()
	clitest.WaitFor(t, func() bool { return strings.Contains(errOut.String(), "token") })
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
			if term, err := x.e.Campaign(ectx, x.v); err == nil {
				won <- term.Value()
			}
		}()
	}
	wkey := clitest.CandidateKey(ctx, t, best, "host-worst")
	clitest.CandidateKey(ctx, t, best, "host-best")
	if code, rout, rerr := clitest.Run(ctx, t, ns, "resign", "sched", "--to", wkey, "--deadline", "10s"); code != cmdutil.ExitOK {
		t.Fatalf("resign --to: exit %d\n%s%s", code, rout, rerr)
	}
	if v := <-won; v != "host-worst" {
		t.Fatalf("%s leads after resign --to named host-worst:\n%s", v, errOut.String())
	}
	stop()
	<-done
}
