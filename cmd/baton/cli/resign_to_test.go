package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
)

func candidateKey(ctx context.Context, t *testing.T, e *election.Election, value string) string {
	t.Helper()
	var key string
	waitFor(t, func() bool {
		cands, err := e.Candidates(ctx)
		for _, c := range cands {
			if err == nil && c.Value == value {
				key = c.Key
			}
		}
		return key != ""
	})
	return key
}

// Without --force the Preferred leader is asked and hands over under Run.
func TestResignToAsksThePreferredLeader(t *testing.T) {
	ctx := testContext(t)
	cli := srv.Client(t)
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
	asked := make(chan election.EndRequest, 1)
	runDone := make(chan error, 1)
	go func() {
		runDone <- a.Run(rctx, "host-a", func(ctx context.Context, term *election.Term) error {
			select {
			case <-term.EndRequested():
				r, _ := term.EndRequest()
				asked <- r
			case <-ctx.Done():
			}
			return nil
		})
	}()
	waitFor(t, func() bool { return a.IsLeader() })
	won := make(chan *election.Term, 2)
	for _, x := range []struct {
		e *election.Election
		v string
	}{{b, "host-b"}, {c, "host-c"}} {
		go func() {
			term, err := x.e.Campaign(rctx, x.v)
			if err == nil {
				won <- term
			}
		}()
	}
	bkey := candidateKey(ctx, t, a, "host-b") // the worst candidate: only asked for by name
	candidateKey(ctx, t, a, "host-c")

	code, out, errOut := run(ctx, t, ns, "resign", "sched", "--to", bkey, "--deadline", "10s")
	if code != ExitOK || !strings.Contains(out, "host-b leads") {
		t.Fatalf("resign --to: exit %d\n%s\n%s", code, out, errOut)
	}
	r := <-asked
	if r.To != bkey || !strings.HasPrefix(r.By, "baton resign by ") {
		t.Fatalf("request %+v", r)
	}
	if term := <-won; term.Value() != "host-b" {
		t.Fatalf("%s leads", term.Value())
	}
	// The oldest strategy takes no requests.
	o, _ := election.New(cli, "old", election.WithNamespace(ns))
	defer o.Close()
	to, err := o.Campaign(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut = run(ctx, t, ns, "resign", "old", "--to", "/"+ns+"/v1/election/old/1234")
	if code != ExitRefused || !strings.Contains(errOut, "oldest strategy") {
		t.Fatalf("resign --to under oldest: exit %d, %s", code, errOut)
	}
	_ = to.Resign(ctx)
	code, _, errOut = run(ctx, t, ns, "resign", "sched", "--to", "/"+ns+"/v1/election/other/1234")
	if code != ExitUsage || !strings.Contains(errOut, "belongs to election") {
		t.Fatalf("resign --to another election's key: exit %d, %s", code, errOut)
	}
	rcancel()
	<-runDone
}

// With --force the operator hands over in one transaction with the audit
// record; under Oldest only to the next candidate.
func TestResignToForceHandsOverWithAnAuditRecord(t *testing.T) {
	ctx := testContext(t)
	cli := srv.Client(t)
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
		bkey := candidateKey(ctx, t, a, "host-b")
		go func() { term, _ := c.Campaign(ctx, "host-c"); won <- term }()
		ckey := candidateKey(ctx, t, a, "host-c")
		force := []string{"--force", "--reason", "drain host-a", "--even-if-alive", "--watch", "100ms"}
		if s == election.Oldest {
			code, out, errOut := run(ctx, t, ns, append([]string{"resign", name, "--to", ckey}, force...)...)
			if code == ExitOK || !strings.Contains(errOut, "not the next") {
				t.Fatalf("%s: force to a candidate behind another: exit %d\n%s\n%s", s, code, out, errOut)
			}
		}
		to := bkey
		if s == election.Preferred {
			to = ckey
		}
		code, out, errOut := run(ctx, t, ns, append([]string{"resign", name, "--to", to}, force...)...)
		if code != ExitOK || !strings.Contains(out, "handed election") {
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
		resp, err := cli.Get(ctx, auditPrefix(ns), clientv3.WithLastCreate()...)
		if err != nil || len(resp.Kvs) == 0 {
			t.Fatalf("audit: %v", err)
		}
		var rec auditRecord
		if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil || rec.Action != actionForceTransfer || rec.To != to || rec.Key != ta.Key() {
			t.Fatalf("%s: audit record %+v, %v", s, rec, err)
		}
		_ = term.Resign(ctx)
		_ = (<-won).Resign(ctx)
	}
}
