package hold_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/election"
)

// baton elect campaigns with the attributes and the strategy it is given:
// the library's Candidates sees them on the leader.
func TestElectCampaignsWithPriorityVersionAndStrategy(t *testing.T) {
	const ns, name = "elect-attrs", "svc"
	ctx, cancel := context.WithCancel(clitest.TestContext(t))
	defer cancel()
	var out, errOut clitest.SyncBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- clitest.RunTo(ctx, ns, &out, &errOut, "elect", "--strategy", "preferred", "--priority", "7", "--version", "v2.1",
			"--handover-deadline", "3s", name, "host-a")
	}()
	e, err := election.New(clitest.Srv.Client(t), name, election.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var got []election.Candidate
	clitest.WaitFor(t, func() bool {
		got, err = e.Candidates(ctx)
		return err == nil && len(got) == 1 && got[0].Leader
	})
	if c := got[0]; c.Value != "host-a" || c.Priority != 7 || c.Version != "v2.1" || c.Strategy != election.Preferred {
		t.Fatalf("the leader is %+v; want host-a with priority 7, version v2.1, strategy preferred", c)
	}
	cancel()
	select {
	case code := <-exited:
		if code != cmdutil.ExitOK {
			t.Fatalf("elect exited %d: %s", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("elect did not exit")
	}
}

// Bad candidate flags exit 64, naming the flag, before campaigning.
func TestElectRefusesBadCandidateFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--strategy", "newest"}, "--strategy \"newest\": must be oldest or preferred"},
		{[]string{"--strategy", ""}, "--strategy"},
		{[]string{"--version", ""}, "--version \"\": must be 1 to 64 bytes"},
		{[]string{"--version", "v1 beta"}, "--version \"v1 beta\": byte 2"},
		{[]string{"--version", strings.Repeat("1", 65)}, "must be 1 to 64 bytes"},
		{[]string{"--priority", "high"}, "--priority"},
		{[]string{"--strategy", "preferred", "--handover-deadline", "50ms"}, "--handover-deadline 50ms: must be at least 100ms"},
		{[]string{"--strategy", "preferred", "--handover-deadline", "6m"}, "at most 5m0s"},
		{[]string{"--handover-deadline", "5s"}, "--handover-deadline is for --strategy preferred"},
	}
	for _, c := range cases {
		args := append(append([]string{"elect"}, c.args...), "svc", "host-a")
		code, _, errOut := clitest.Run(clitest.TestContext(t), t, "elect-bad", args...)
		if code != cmdutil.ExitUsage || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d with %q", c.args, code, errOut, cmdutil.ExitUsage, c.want)
		}
	}
}
