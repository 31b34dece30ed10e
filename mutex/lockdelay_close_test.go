package mutex_test

import (
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
)

// Close releases the locks it holds cleanly, lock-delay records included:
// the next holder is not kept out as after a loss.
func TestCloseWithALockHeldIsACleanRelease(t *testing.T) {
	const d = 3 * time.Second
	ctx := etcdtest.Context(t, 30*time.Second)
	holder := delayed(t, client(t), "ld-close", d)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	at := lockAfter(ctx, t, delayed(t, client(t), "ld-close", d))
	closed := time.Now()
	if err := holder.Close(); err != nil {
		t.Fatal(err)
	}
	got, ok := <-at
	if !ok {
		return
	}
	if took := got.Sub(closed); took >= d {
		t.Fatalf("next holder in %v after Close released the lock; want no lock-delay (%v)", took, d)
	}
}
