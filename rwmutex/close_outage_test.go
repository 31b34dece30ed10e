package rwmutex_test

import (
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
)

// Close of an RWMutex holding several read locks returns promptly while
// etcd is unreachable: its lease's revocation takes every key at once (or
// the lease expires), so there is no reason to wait on each read lock's
// delete in turn.
func TestCloseWithReadLocksHeldReturnsPromptlyWithEtcdUnreachable(t *testing.T) {
	const bound = 3 * time.Second
	pcli, proxy := proxied(t)
	ctx := etcdtest.Context(t, 60*time.Second)
	rw := newRW(t, pcli, "close-outage")
	t.Cleanup(proxy.Restore) // before newRW's Close runs
	for range 3 {
		if _, err := rw.RLock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	etcdtest.WaitKeys(t, client(t), rw.Prefix(), 3)

	proxy.Blackhole()
	closed := make(chan error, 1)
	start := time.Now()
	go func() { closed <- rw.Close() }()
	select {
	case <-closed:
		t.Logf("Close returned in %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(bound):
		select {
		case <-closed:
			t.Fatalf("Close with 3 read locks held and etcd unreachable took %v, want at most %v", time.Since(start).Round(time.Millisecond), bound)
		case <-time.After(30 * time.Second):
			proxy.Restore()
			t.Fatalf("Close with 3 read locks held and etcd unreachable did not return within %v", bound+30*time.Second)
		}
	}
}
