package rwmutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/rwmutex"
)

// TestLockDelayAfterALostWriterNotAfterUnlock: a reader waits the delay
// after the writer's lease is revoked, not after the writer's Unlock.
func TestLockDelayAfterALostWriterNotAfterUnlock(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	cli := client(t)
	const d = 2 * time.Second
	opt := []rwmutex.Option{rwmutex.WithLockDelay(d), rwmutex.WithNamespace("rwdelay")}
	for _, clean := range []bool{true, false} {
		w, err := newRW(t, cli, "catalog", opt...).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if clean {
			err = w.Unlock(ctx)
		} else {
			_, err = cli.Revoke(ctx, w.Lease())
		}
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r, err := newRW(t, client(t), "catalog", opt...).RLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if clean && took > time.Second || !clean && took < d {
			t.Fatalf("clean %v: reader in after %v (delay %v)", clean, took, d)
		}
		_ = r.Unlock(context.Background())
	}
}
