package session_test

import (
	"context"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// closeBound is how long Close of a session.Wrap session may take with
// etcd unreachable: it revokes nothing (the lease is the caller's), so it
// has nothing to wait for on etcd.
const closeBound = 3 * time.Second

// Close of a session.Wrap session returns promptly while etcd is
// unreachable, whatever its Mutexes left to do: a Lock cancelled while
// waiting, an Unlock that could not reach etcd, or a lock still held.
func TestWrapCloseReturnsPromptlyWithEtcdUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name string
		// holder: another Mutex holds, and a Lock through the session
		// waits behind it until its ctx ends with etcd cut off.
		holder bool
		// leave, without a holder, runs with etcd cut off on the lock
		// taken through the session.
		leave func(t *testing.T, held *mutex.Lock)
	}{
		{name: "Lock cancelled while waiting", holder: true},
		{name: "Unlock that could not reach etcd", leave: func(t *testing.T, held *mutex.Lock) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if err := held.Unlock(ctx); err == nil {
				t.Fatal("Unlock with etcd cut off succeeded")
			}
		}},
		{name: "lock held", leave: func(*testing.T, *mutex.Lock) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct := client(t)
			pcli, proxy := proxied(t)
			ctx := etcdtest.Context(t, 60*time.Second)
			cs, err := concurrency.NewSession(pcli, concurrency.WithTTL(30))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cs.Close() })
			ws, err := session.Wrap(cs)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ws.Close() })
			name := "wrap-close-" + tc.name
			m, err := mutex.New(pcli, name, mutex.WithSession(ws))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close() })
			t.Cleanup(proxy.Restore) // before the closes above run

			if tc.holder {
				other, err := mutex.New(direct, name)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = other.Close() })
				lo, err := other.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = lo.Unlock(context.Background()) })
				lctx, cancel := context.WithCancel(ctx)
				got := make(chan error, 1)
				go func() {
					l, err := m.Lock(lctx)
					if err == nil {
						_ = l.Unlock(context.Background())
					}
					got <- err
				}()
				etcdtest.WaitKeys(t, direct, m.Prefix(), 2)
				proxy.Blackhole()
				cancel()
				select {
				case err := <-got:
					if err == nil {
						t.Fatal("Lock acquired while another held")
					}
				case <-time.After(5 * time.Second):
					t.Fatal("Lock did not return within 5s of its ctx's end")
				}
			} else {
				held, err := m.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				proxy.Blackhole()
				tc.leave(t, held)
			}

			closed := make(chan error, 1)
			start := time.Now()
			go func() { closed <- ws.Close() }()
			select {
			case <-closed:
				t.Logf("Close returned in %v", time.Since(start).Round(time.Millisecond))
			case <-time.After(closeBound):
				proxy.Restore()
				select {
				case <-closed:
					t.Fatalf("Close of a session.Wrap session with etcd unreachable did not return within %v; it returned only once etcd was reachable again, %v after it began",
						closeBound, time.Since(start).Round(time.Millisecond))
				case <-time.After(15 * time.Second):
					t.Fatalf("Close of a session.Wrap session with etcd unreachable did not return within %v, nor 15s after etcd was reachable again", closeBound)
				}
			}
		})
	}
}
