package mutex_test

import (
	"context"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// waitOnly waits, by watching, until the keys under prefix are exactly
// want; it returns the keys last seen and whether they matched within d.
func waitOnly(t *testing.T, cli *clientv3.Client, prefix string, want []string, d time.Duration) ([]string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var seen []string
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return seen, false
		}
		seen = seen[:0]
		for _, kv := range resp.Kvs {
			seen = append(seen, string(kv.Key))
		}
		if slices.Equal(seen, want) {
			return seen, true
		}
		wch := cli.Watch(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
		if _, ok := <-wch; !ok {
			return seen, false
		}
	}
}

// A Mutex on a borrowed lease (an etcd session given to WithSession, or a
// session.Wrap session) is closed while its Lock waits in the queue and
// etcd is cut off. The lease lives on (the caller's etcd session is still
// open), so nothing but baton removes the queued key: once etcd is
// reachable again it must go within 10 s, or it blocks the name for as
// long as the caller's session lives.
func TestCloseOnBorrowedLeaseWhileCutOffLeavesNoQueuedKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap bool
	}{
		{name: "WithSession etcd session"},
		{name: "session.Wrap", wrap: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct := client(t)
			pcli, proxy := proxied(t)
			ctx := etcdtest.Context(t, 90*time.Second)
			cs := session(t, pcli, 30)
			name := "borrowed-close-cleanup"
			if tc.wrap {
				name += "-wrap"
			}
			opt := mutex.WithSession(cs)
			var ws *bsession.Session
			if tc.wrap {
				var err error
				ws, err = bsession.Wrap(cs)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = ws.Close() })
				opt = mutex.WithSession(ws)
			}
			m, err := mutex.New(pcli, name, opt)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close() })
			t.Cleanup(proxy.Restore) // before the closes above run

			other := newMutex(t, direct, name)
			lo, err := other.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lo.Unlock(ctx)
			got := make(chan error, 1)
			go func() {
				l, err := m.Lock(ctx)
				if err == nil {
					_ = l.Unlock(context.Background())
				}
				got <- err
			}()
			waitKeys(t, direct, m.Prefix(), 2)

			proxy.Blackhole()
			mClosed, allClosed := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(allClosed)
				_ = m.Close()
				close(mClosed)
				if ws != nil {
					_ = ws.Close()
				}
			}()
			select {
			case <-mClosed:
			case <-time.After(15 * time.Second):
				t.Fatal("Close of a Mutex on a borrowed lease did not return within 15s with etcd cut off")
			}
			select {
			case err := <-got:
				if err == nil {
					t.Fatal("the queued Lock acquired")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the queued Lock did not return within 5s of Close")
			}
			proxy.Restore()

			if seen, ok := waitOnly(t, direct, m.Prefix(), []string{lo.Key()}, 10*time.Second); !ok {
				t.Fatalf("10s after etcd was reachable again, the closed Mutex's queued key is still there (keys %v; holder %s), while the caller's etcd session lives",
					seen, lo.Key())
			}
			select {
			case <-allClosed:
			case <-time.After(15 * time.Second):
				t.Fatal("Close did not return within 15s of etcd being reachable again")
			}
			select {
			case <-cs.Done():
				t.Fatal("the caller's etcd session ended: the test proves nothing")
			default:
			}
		})
	}
}
