package election_test

// The scenarios of Kubernetes' coordinated leader election tests (KEP-4355:
// client-go's leaderelection with Coordinated set, and the apiserver's
// integration tests of it), played by baton candidates under Preferred. A
// Kubernetes candidate names a binary and an emulation version and the
// oldest emulation version, then binary version, leads: here the version
// is "<emulation>-<binary>", which orders the same way.

import (
	"context"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
)

// controllers are candidates run as a controller would: Run, handing over
// as soon as it is asked to end its term.
type controllers struct {
	t    *testing.T
	name string
	mu   sync.Mutex
	stop map[string]func()
}

func newControllers(t *testing.T, name string) *controllers {
	c := &controllers{t: t, name: name, stop: map[string]func(){}}
	t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, stop := range c.stop {
			stop()
		}
	})
	return c
}

func (c *controllers) run(cli *clientv3.Client, id string, opts ...election.Option) {
	c.t.Helper()
	e, err := election.New(cli, c.name, append([]election.Option{election.WithTTL(2 * time.Second),
		election.WithHandoverDeadline(2 * time.Second)}, opts...)...)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx, id, func(ctx context.Context, t *election.Term) error {
			select {
			case <-t.EndRequested():
			case <-ctx.Done():
			}
			return nil
		})
	}()
	c.mu.Lock()
	c.stop[id] = func() { cancel(); <-done; _ = e.Close() }
	c.mu.Unlock()
}

func (c *controllers) cancel(id string) {
	c.mu.Lock()
	stop := c.stop[id]
	delete(c.stop, id)
	c.mu.Unlock()
	stop()
}

// pollLeader waits until id leads ("" : nobody), as pollForLease does.
func pollLeader(t *testing.T, cli *clientv3.Client, name, id string, within time.Duration) {
	t.Helper()
	e := newElection(t, cli, name)
	deadline := time.Now().Add(within)
	for {
		l, err := e.Leader(context.Background())
		if (err == nil && l.Value == id) || (id == "" && l.IsZero()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader = %q (%v), want %q within %v", l.Value, err, id, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func preferredVersion(v string) []election.Option {
	return []election.Option{election.WithStrategy(election.Preferred), election.WithVersion(v)}
}

func TestCoordinatedSingleCandidateLeads(t *testing.T) {
	cli := client(t)
	c := newControllers(t, "cle-single")
	c.run(cli, "foo1", preferredVersion("1.20.0-1.20.0")...)
	pollLeader(t, cli, "cle-single", "foo1", 10*time.Second)
}

func TestCoordinatedOldestVersionOfManyLeads(t *testing.T) {
	cli := client(t)
	c := newControllers(t, "cle-many")
	c.run(cli, "baz1", preferredVersion("1.20.0-1.20.0")...)
	c.run(cli, "baz2", preferredVersion("1.19.0-1.20.0")...)
	c.run(cli, "baz3", preferredVersion("1.19.0-1.19.0")...)
	c.run(cli, "baz4", preferredVersion("1.19.0-1.20.0")...)
	pollLeader(t, cli, "cle-many", "baz3", 25*time.Second)
}

func TestCoordinatedLeaderSwappedWhenABetterOneJoins(t *testing.T) {
	cli := client(t)
	c := newControllers(t, "cle-swap")
	c.run(cli, "bar1", preferredVersion("1.20.0-1.20.0")...)
	pollLeader(t, cli, "cle-swap", "bar1", 10*time.Second)
	c.run(cli, "bar2", preferredVersion("1.19.0-1.19.0")...)
	pollLeader(t, cli, "cle-swap", "bar2", 10*time.Second)
}

// A candidate that does not coordinate (here: the Oldest strategy) leads;
// a coordinated one joining does not kick it off, and leads once it left.
func TestCoordinatedUpgradeSkew(t *testing.T) {
	cli := client(t)
	c := newControllers(t, "cle-skew")
	c.run(cli, "foo1-130")
	pollLeader(t, cli, "cle-skew", "foo1-130", 10*time.Second)
	c.run(cli, "foo1-131", preferredVersion("1.31.0-1.31.0")...)
	pe := newElection(t, cli, "cle-skew")
	deadline := time.Now().Add(10 * time.Second)
	for {
		cands, err := pe.Candidates(context.Background())
		if err == nil && len(cands) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the coordinated candidate never showed: %+v, %v", cands, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // longer than its hand-over deadline: it must not preempt
	pollLeader(t, cli, "cle-skew", "foo1-130", time.Second)
	c.cancel("foo1-130")
	pollLeader(t, cli, "cle-skew", "foo1-131", 10*time.Second)
}

// The leader's renewals are blocked (its traffic blackholed): another
// candidate takes over once its lease expires; when that one shuts down,
// the first leads again, without a restart.
func TestCoordinatedLeadershipMovesWhenRenewalsAreBlockedAndComesBack(t *testing.T) {
	cli := client(t)
	pcli, proxy := proxied(t)
	const name = "cle-transfer"
	c := newControllers(t, name)
	c.run(pcli, "server1", preferredVersion("1.31.0-1.31.0")...)
	pollLeader(t, cli, name, "server1", 10*time.Second)
	c.run(cli, "server2", preferredVersion("1.31.0-1.31.0")...)
	waitCandidates(t, newElection(t, cli, name), 2)
	proxy.Blackhole()
	pollLeader(t, cli, name, "server2", 15*time.Second)
	c.cancel("server2")
	proxy.Restore()
	pollLeader(t, cli, name, "server1", 20*time.Second)
}
