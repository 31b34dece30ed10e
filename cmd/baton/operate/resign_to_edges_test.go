package operate_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/operate"
	"github.com/batonhq/baton/election"
)

// A forced hand-over whose target leaves while baton watches the leader's
// lease: the transaction's guard fails and nothing is done; the operator
// asked for the target to lead and it does not: baton exits 77.
func TestResignToEdgeForceTransferThatDidNothingIsRefused(t *testing.T) {
	ctx := clitest.TestContext(t)
	cli := clitest.Srv.Client(t)
	const ns = "edge-force-nothing"
	opts := []election.Option{election.WithNamespace(ns)}
	a, _ := election.New(cli, "sched", opts...)
	defer a.Close()
	b, _ := election.New(clitest.Srv.Client(t), "sched", opts...)
	defer b.Close()
	c, _ := election.New(clitest.Srv.Client(t), "sched", opts...)
	defer c.Close()
	ta, err := a.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ta.Resign(ctx) }()
	go func() { _, _ = b.Campaign(ctx, "host-b") }()
	clitest.CandidateKey(ctx, t, a, "host-b")
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() { _, _ = c.Campaign(cctx, "host-c") }()
	clitest.CandidateKey(ctx, t, a, "host-c")
	go func() {
		time.Sleep(700 * time.Millisecond) // during the lease watch
		ccancel()
	}()
	code, out, errOut := clitest.Run(ctx, t, ns, "resign", "sched", "--to", "host-c", "--force", "--reason", "drain host-a",
		"--even-if-alive", "--watch", "2s")
	if !strings.Contains(errOut, "nothing was forced") || code != cmdutil.ExitRefused {
		t.Fatalf("exit %d, want the hand-over refused by its guard\n%s\n%s", code, out, errOut)
	}
	if code == cmdutil.ExitOK {
		t.Fatalf("forced hand-over to host-c did nothing (host-c left) and exits 0:\n%s", out)
	}
}

// A key under the election's prefix that is not baton's may be named
// anything: the refusal names it, escaped.
func TestResignToEdgeForeignKeyNamedEscapedInTheRefusal(t *testing.T) {
	ctx := clitest.TestContext(t)
	cli := clitest.Srv.Client(t)
	const ns = "edge-foreign-hostile"
	opts := []election.Option{election.WithNamespace(ns)}
	a, _ := election.New(cli, "sched", opts...)
	defer a.Close()
	c, _ := election.New(clitest.Srv.Client(t), "sched", opts...)
	defer c.Close()
	ta, err := a.Campaign(ctx, "host-a")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ta.Resign(ctx) }()
	g, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = cli.Revoke(context.Background(), g.ID) }()
	if _, err := cli.Put(ctx, a.Prefix()+"evil\x1b[2J\rFAKE\u202e", "x", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	go func() { _, _ = c.Campaign(cctx, "host-c") }()
	clitest.CandidateKey(ctx, t, a, "host-c")
	for _, args := range [][]string{
		{"resign", "sched", "--to", "host-c", "--force", "--reason", "drain", "--even-if-alive", "--watch", "100ms"},
		{"resign", "sched", "--to", "host-c", "--deadline", "2s"},
	} {
		code, out, errOut := clitest.Run(ctx, t, ns, args...)
		if code != cmdutil.ExitRefused {
			t.Errorf("%v: exit %d, want %d\n%s\n%s", args, code, cmdutil.ExitRefused, out, errOut)
		}
		for _, s := range []string{out, errOut} {
			if strings.ContainsAny(s, "\x1b\r\u202e") {
				t.Errorf("%v: raw control text printed: %q", args, s)
			}
		}
	}
}

// A forced hand-over takes the operators access level, as unlock --force:
// a contender is refused (exit 78), nothing is written and the leader
// leads on; an operator hands over past the next candidate, audited with
// who, from whom and to whom.
func TestResignToForceRefusedWithoutTheRight(t *testing.T) {
	asCtx := clitest.StartSecureDevCtx(t, "worker,oncall,root", "namespaces:\n  - name: jobs\n    contenders: [worker]\n    operators: [oncall]\n")
	ctx := clitest.TestContext(t)
	as := func(user string, args ...string) (int, string, string) { return asCtx(ctx, user, args...) }
	ectx, stop := context.WithCancel(ctx)
	var elects sync.WaitGroup
	defer func() { stop(); elects.Wait() }()
	for _, host := range []string{"host-a", "host-b", "host-c"} {
		elects.Go(func() { _, _, _ = asCtx(ectx, "worker", "--namespace", "jobs", "elect", "sched", host) })
		clitest.WaitFor(t, func() bool {
			code, out, _ := as("oncall", "--namespace", "jobs", "candidates", "sched")
			return code == cmdutil.ExitOK && strings.Contains(out, host)
		})
	}
	force := []string{"--namespace", "jobs", "resign", "sched", "--to", "host-c", "--force", "--reason", "drain host-a", "--even-if-alive", "--watch", "100ms"}
	code, _, errOut := as("worker", force...)
	if code != cmdutil.ExitDenied || !strings.Contains(errOut, "permission denied") {
		t.Fatalf("a contender's forced hand-over: exit %d, want %d: %s", code, cmdutil.ExitDenied, errOut)
	}
	if code, out, _ := as("oncall", "--namespace", "jobs", "leader", "sched"); code != cmdutil.ExitOK || !strings.Contains(out, "host-a") {
		t.Fatalf("after a refused hand-over: exit %d, leader %s", code, out)
	}
	if code, out, _ := as("oncall", "--namespace", "jobs", "-o", "json", "audit"); code != cmdutil.ExitOK || strings.Contains(out, operate.ActionForceTransfer) {
		t.Fatalf("the refused hand-over left an audit record (exit %d): %s", code, out)
	}
	code, out, errOut := as("oncall", force...)
	if code != cmdutil.ExitOK || !strings.Contains(out, "handed election") {
		t.Fatalf("an operator's forced hand-over: exit %d: %s%s", code, out, errOut)
	}
	clitest.WaitFor(t, func() bool {
		code, out, _ := as("oncall", "--namespace", "jobs", "leader", "sched")
		return code == cmdutil.ExitOK && strings.Contains(out, "host-c")
	})
	code, out, _ = as("oncall", "--namespace", "jobs", "-o", "json", "audit")
	if code != cmdutil.ExitOK || !strings.Contains(out, `"to_holder": "host-c"`) || !strings.Contains(out, `"holder": "host-a"`) ||
		!strings.Contains(out, `"etcd_identity": "oncall"`) {
		t.Fatalf("audit (exit %d): %s", code, out)
	}
}
