package operate_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/operate"
	"github.com/batonhq/baton/election"
)

// askedLeaderAndTwo runs a as host-a under Run, whose fn returns once its
// term is asked to end (the request sent on asked), then queues b as
// host-b and c as host-c, in that order, on rctx; the terms they win go
// to won.
func askedLeaderAndTwo(ctx, rctx context.Context, t *testing.T, a, b, c *election.Election) (asked <-chan election.EndRequest, runDone <-chan error, won <-chan *election.Term) {
	t.Helper()
	ask, done, w := make(chan election.EndRequest, 2), make(chan error, 1), make(chan *election.Term, 2)
	go func() {
		done <- a.Run(rctx, "host-a", func(ctx context.Context, term *election.Term) error {
			select {
			case <-term.EndRequested():
				r, _ := term.EndRequest()
				ask <- r
			case <-ctx.Done():
			}
			return nil
		})
	}()
	clitest.WaitFor(t, func() bool { return a.IsLeader() })
	for _, x := range []struct {
		e *election.Election
		v string
	}{{b, "host-b"}, {c, "host-c"}} {
		go func() {
			if term, err := x.e.Campaign(rctx, x.v); err == nil {
				w <- term
			}
		}()
		clitest.CandidateKey(ctx, t, a, x.v)
	}
	return ask, done, w
}

// Without --force the Preferred leader is asked and hands over under Run.
func TestResignToAsksThePreferredLeader(t *testing.T) {
	ctx := clitest.TestContext(t)
	cli := clitest.Srv.Client(t)
	const ns = "resign-to"
	opts := []election.Option{election.WithNamespace(ns), election.WithStrategy(election.Preferred)}
	a, _ := election.New(cli, "sched", opts...)
	defer a.Close()
	b, _ := election.New(cli, "sched", append(opts, election.WithPriority(-1))...)
	defer b.Close()
	c, _ := election.New(cli, "sched", opts...)
	defer c.Close()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	asked, runDone, won := askedLeaderAndTwo(ctx, rctx, t, a, b, c)
	bkey := clitest.CandidateKey(ctx, t, a, "host-b") // the worst candidate: only asked for by name
	clitest.CandidateKey(ctx, t, a, "host-c")

	code, out, errOut := clitest.Run(ctx, t, ns, "resign", "sched", "--to", bkey, "--deadline", "10s")
	if code != cmdutil.ExitOK || !strings.Contains(out, "host-b leads") {
		t.Fatalf("resign --to: exit %d\n%s\n%s", code, out, errOut)
	}
	r := <-asked
	if r.To != bkey || !strings.HasPrefix(r.By, "baton resign by ") {
		t.Fatalf("request %+v", r)
	}
	if term := <-won; term.Value() != "host-b" {
		t.Fatalf("%s leads", term.Value())
	}
	code, _, errOut = clitest.Run(ctx, t, ns, "resign", "sched", "--to", "/"+ns+"/v1/election/other/1234")
	if code != cmdutil.ExitUsage || !strings.Contains(errOut, "belongs to election") {
		t.Fatalf("resign --to another election's key: exit %d, %s", code, errOut)
	}
	rcancel()
	<-runDone
}

// Under the default strategy the leader is asked too, for a candidate
// named by its identity past the next one: it hands over under Run, the
// one skipped waits on behind the new leader, and Run campaigns again.
func TestResignToAsksTheOldestLeader(t *testing.T) {
	ctx := clitest.TestContext(t)
	cli := clitest.Srv.Client(t)
	const ns = "resign-to-oldest"
	opts := []election.Option{election.WithNamespace(ns)}
	a, _ := election.New(cli, "sched", opts...)
	defer a.Close()
	b, _ := election.New(cli, "sched", opts...)
	defer b.Close()
	c, _ := election.New(cli, "sched", opts...)
	defer c.Close()
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	asked, runDone, won := askedLeaderAndTwo(ctx, rctx, t, a, b, c)
	ckey := clitest.CandidateKey(ctx, t, a, "host-c")

	code, out, errOut := clitest.Run(ctx, t, ns, "resign", "sched", "--to", "host-c", "--deadline", "10s")
	if code != cmdutil.ExitOK || !strings.Contains(out, "host-c leads") {
		t.Fatalf("resign --to host-c: exit %d\n%s\n%s", code, out, errOut)
	}
	if r := <-asked; r.To != ckey {
		t.Fatalf("request %+v, want to %s", r, ckey)
	}
	term := <-won
	if term.Value() != "host-c" {
		t.Fatalf("%s leads, want host-c", term.Value())
	}
	// host-a campaigns again: three candidates, host-c first.
	clitest.WaitFor(t, func() bool {
		cands, err := a.Candidates(ctx)
		return err == nil && len(cands) == 3 && cands[0].Value == "host-c"
	})
	select {
	case other := <-won:
		t.Fatalf("%s leads beside host-c", other.Value())
	default:
	}
	code, _, errOut = clitest.Run(ctx, t, ns, "resign", "sched", "--to", "host-nobody")
	if code == cmdutil.ExitOK || !strings.Contains(errOut, "no candidate") {
		t.Fatalf("resign --to an unknown identity: exit %d, %s", code, errOut)
	}
	_ = term.Resign(ctx)
	// host-b, moved behind host-c, and host-a, campaigning again under
	// Run, enqueued in either order (nothing orders a skipped candidate's
	// re-put before a later Campaign): whichever leads next ends the test.
	var next *election.Term
	clitest.WaitFor(t, func() bool {
		select {
		case next = <-won:
			return true
		default:
			return a.IsLeader()
		}
	})
	if next != nil {
		_ = next.Resign(ctx)
	}
	rcancel()
	<-runDone
}

// With --force the operator hands over in one transaction with the audit
// record, under Oldest past the next candidate too.
func TestResignToForceHandsOverWithAnAuditRecord(t *testing.T) {
	ctx := clitest.TestContext(t)
	cli := clitest.Srv.Client(t)
	const ns = "resign-to-force"
	for _, s := range []election.Strategy{election.Oldest, election.Preferred} {
		name := "sched-" + s.String()
		opts := []election.Option{election.WithNamespace(ns), election.WithStrategy(s)}
		a, _ := election.New(cli, name, opts...)
		defer a.Close()
		b, _ := election.New(cli, name, opts...)
		defer b.Close()
		c, _ := election.New(cli, name, opts...)
		defer c.Close()
		ta, err := a.Campaign(ctx, "host-a")
		if err != nil {
			t.Fatal(err)
		}
		won := make(chan *election.Term, 2)
		go func() { term, _ := b.Campaign(ctx, "host-b"); won <- term }()
		bkey := clitest.CandidateKey(ctx, t, a, "host-b")
		go func() { term, _ := c.Campaign(ctx, "host-c"); won <- term }()
		ckey := clitest.CandidateKey(ctx, t, a, "host-c")
		force := []string{"--force", "--reason", "drain host-a", "--even-if-alive", "--watch", "100ms"}
		_ = bkey
		to := ckey
		code, out, errOut := clitest.Run(ctx, t, ns, append([]string{"resign", name, "--to", to}, force...)...)
		if code != cmdutil.ExitOK || !strings.Contains(out, "handed election") {
			t.Fatalf("%s: force --to: exit %d\n%s\n%s", s, code, out, errOut)
		}
		term := <-won
		if term.Key() != to || term.Token() <= ta.Token() {
			t.Fatalf("%s: %s leads with token %d (A's %d), want %s", s, term.Key(), term.Token(), ta.Token(), to)
		}
		select {
		case <-ta.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the old leader was not told", s)
		}
		if cause := context.Cause(ta.Context()); !errors.Is(cause, election.ErrKeyGone) {
			t.Fatalf("%s: old leader's cause %v", s, cause)
		}
		resp, err := cli.Get(ctx, keyspace.AuditPrefix(ns), clientv3.WithLastCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("audit: %v", err)
		}
		var rec keyspace.AuditRecord
		if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.Action != operate.ActionForceTransfer || rec.To != to || rec.Key != ta.Key() ||
			rec.Holder != "host-a" || rec.ToHolder != "host-c" || rec.Time.IsZero() || rec.Host == "" || rec.Reason != "drain host-a" {
			t.Fatalf("%s: audit record %+v, %v", s, rec, err)
		}
		select {
		case other := <-won:
			t.Fatalf("%s: %s leads beside host-c", s, other.Value())
		default:
		}
		_ = term.Resign(ctx)
		_ = (<-won).Resign(ctx)
	}
}

// Under Oldest, a forced hand-over past a candidate while etcd's own
// candidate waits is refused, and nothing is done: no audit record, the
// leader leads on.
func TestResignToForceRefusedWithAnEtcdCandidate(t *testing.T) {
	ctx := clitest.TestContext(t)
	cli := clitest.Srv.Client(t)
	const ns = "resign-to-foreign"
	a, _ := election.New(cli, "sched", election.WithNamespace(ns))
	defer a.Close()
	c, _ := election.New(cli, "sched", election.WithNamespace(ns))
	defer c.Close()
	ta, err := a.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(10))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ee := concurrency.NewElection(s, strings.TrimSuffix(a.Prefix(), "/"))
	ectx, ecancel := context.WithCancel(ctx)
	defer ecancel()
	go func() { _ = ee.Campaign(ectx, "etcd-candidate") }()
	clitest.CandidateKey(ctx, t, a, "etcd-candidate")
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() { _, _ = c.Campaign(cctx, "host-c") }()
	clitest.CandidateKey(ctx, t, a, "host-c")
	for _, args := range [][]string{
		{"resign", "sched", "--to", "host-c", "--force", "--reason", "drain", "--even-if-alive", "--watch", "100ms"},
		{"resign", "sched", "--to", "host-c", "--deadline", "2s"},
	} {
		code, out, errOut := clitest.Run(ctx, t, ns, args...)
		if code != cmdutil.ExitRefused || !strings.Contains(errOut, "not baton's") {
			t.Fatalf("%v: exit %d, want %d\n%s\n%s", args, code, cmdutil.ExitRefused, out, errOut)
		}
	}
	if !ta.IsLeader() {
		t.Fatal("host-a's term ended")
	}
	if resp, err := cli.Get(ctx, keyspace.AuditPrefix(ns), clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("audit records: %v, %v", resp.Count, err)
	}
	_ = ta.Resign(ctx)
}
