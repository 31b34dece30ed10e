package mutex_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	bsession "github.com/batonhq/baton/session"
)

// Two Mutexes of one name on one session take the same key (the lease's)
// in turn. When the first holder's key is force-deleted, the second's
// acquisition of that key must neither overwrite nor erase the lost
// holder's lock-delay record: it waits out the delay like any contender.
// The second Lock starts at a session hook: as the namespace watch hears
// the deletion (the Lock waits for the key in this process), or once the
// lost hold's Context ended (the key is free at once).
func TestLockDelayAfterALossOnTheSameLease(t *testing.T) {
	const d = 2 * time.Second
	for _, tc := range []struct {
		name, suffix string
		at           func(h *core.Hooks, f func(key string))
	}{
		{"next Lock as the deletion is heard", "heard", func(h *core.Hooks, f func(string)) { h.Deleted = f }},
		{"next Lock once the lost hold ended", "ended", func(h *core.Hooks, f func(string)) { h.HoldEnded = f }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := etcdtest.Context(t, 30*time.Second)
			cli := client(t)
			var (
				mu     sync.Mutex
				target string // the lost holder's key, once known
				next   func() // starts the second Lock
				once   sync.Once
			)
			hooks := &core.Hooks{}
			tc.at(hooks, func(key string) {
				mu.Lock()
				ok, f := key == target, next
				mu.Unlock()
				if ok {
					once.Do(func() { go f() })
				}
			})
			sess, err := bsession.New(cli, config.Hooks(hooks), bsession.WithTTL(10*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sess.Close() })
			name := "ld-same-lease-" + tc.suffix
			opts := []mutex.Option{mutex.WithNamespace("delay"), mutex.WithSession(sess), mutex.WithLockDelay(d)}
			first, second := newMutex(t, cli, name, opts...), newMutex(t, cli, name, opts...)
			l, err := first.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			type result struct {
				l   *mutex.Lock
				err error
				at  time.Time
			}
			got := make(chan result, 1)
			mu.Lock()
			target, next = l.Key(), func() {
				l2, err := second.Lock(ctx)
				got <- result{l2, err, time.Now()}
			}
			mu.Unlock()
			if _, err := cli.Delete(ctx, l.Key()); err != nil {
				t.Fatal(err)
			}
			deleted := time.Now()
			r := <-got
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.l.Unlock(ctx)
			if r.l.Key() != l.Key() {
				t.Fatalf("second holder's key %s, want the lost holder's %s (one lease)", r.l.Key(), l.Key())
			}
			if took := r.at.Sub(deleted); took < d {
				t.Fatalf("second Mutex on the lost holder's lease acquired %v after the holder's key %s (token %d) was deleted, with token %d; want the %v lock-delay",
					took.Round(time.Millisecond), l.Key(), l.Token(), r.l.Token(), d)
			}
		})
	}
}

// A record an older build wrote (at held/<segment>, before records were
// per hold) for a holder lost without releasing still delays this build's
// contender: records are read by their value, whatever their key.
func TestLockDelayOfAnOlderBuildsRecordApplies(t *testing.T) {
	const d = 2 * time.Second
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := client(t)
	m := delayed(t, cli, "ld-older-record", d)
	lost := m.Prefix() + "694d81a5c0f4e305"
	_, err := cli.Put(ctx, "/delay/v1/delay/lock/ld-older-record/held/694d81a5c0f4e305",
		fmt.Sprintf(`{"key":%q,"token":1,"delay_ms":%d}`, lost, d.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if took := time.Since(start); took < d {
		t.Fatalf("Lock after an older build's record of a lost holder returned in %v; want the %v delay", took.Round(time.Millisecond), d)
	}
}
