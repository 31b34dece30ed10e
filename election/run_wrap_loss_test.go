package election_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/session"
)

// Run on a session.Wrap session cannot replace the caller's etcd session
// once it is closed or its lease revoked: like Run on an etcd session given
// to WithSession, it must return the loss (an error wrapping ErrLost)
// instead of campaigning again forever.
func TestRunOnWrappedSessionReturnsWhenTheEtcdSessionEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, cs *concurrency.Session)
	}{
		{name: "closed", end: func(t *testing.T, cs *concurrency.Session) {
			if err := cs.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "revoked", end: func(t *testing.T, cs *concurrency.Session) {
			if _, err := cs.Client().Revoke(etcdtest.Context(t, 5*time.Second), cs.Lease()); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := client(t)
			cs, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			logCore, logs := observer.New(zap.WarnLevel)
			ws, err := session.Wrap(cs, session.WithLogger(zap.New(logCore)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ws.Close() })
			e := newElection(t, cli, "run-wrap-"+tc.name, election.WithSession(ws))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			leading := make(chan struct{}, 8)
			runErr := make(chan error, 1)
			go func() {
				runErr <- e.Run(ctx, "host-a", func(ctx context.Context, _ *election.Term) error {
					leading <- struct{}{}
					<-ctx.Done()
					return nil
				})
			}()
			select {
			case <-leading:
			case err := <-runErr:
				t.Fatalf("Run returned before leading: %v", err)
			case <-time.After(10 * time.Second):
				t.Fatal("Run did not lead within 10s")
			}

			tc.end(t, cs)
			select {
			case err := <-runErr:
				if !errors.Is(err, election.ErrLost) {
					t.Fatalf("Run after the etcd session ended = %v, want an error wrapping ErrLost", err)
				}
			case <-time.After(10 * time.Second):
				cancel()
				select {
				case err := <-runErr:
					t.Fatalf("Run on a session.Wrap session whose etcd session was %s did not return within 10s (it returned %v only once its ctx was cancelled); warnings meanwhile: %s",
						tc.name, err, warnings(logs))
				case <-time.After(10 * time.Second):
					t.Fatalf("Run on a session.Wrap session whose etcd session was %s did not return within 10s, nor 10s after its ctx was cancelled; warnings meanwhile: %s",
						tc.name, warnings(logs))
				}
			}
		})
	}
}

// warnings summarises the log entries at Warn and above: how many of each
// message, and the last one's error.
func warnings(logs *observer.ObservedLogs) string {
	counts := map[string]int{}
	var order []string
	last := map[string]any{}
	for _, e := range logs.All() {
		if counts[e.Message] == 0 {
			order = append(order, e.Message)
		}
		counts[e.Message]++
		last[e.Message] = e.ContextMap()["error"]
	}
	out := ""
	for _, m := range order {
		out += fmt.Sprintf("%q x%d (last error: %v); ", m, counts[m], last[m])
	}
	if out == "" {
		return "none"
	}
	return out
}
