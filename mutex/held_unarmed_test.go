package mutex_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/etcdtest"
)

// Held never returns a Lock whose acquisition is still being completed:
// unlocking what Held returned, at any moment, is safe.
func TestHeldNeverReturnsAnUnarmedLock(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 20*time.Second)
	hooks := &core.Hooks{}
	m := newMutex(t, cli, "edge-held-arm", config.Hooks(hooks))
	hooks.BeforeArm = func(string) {
		for _, l := range m.Held() {
			_ = l.Unlock(context.Background())
		}
	}
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
