package ui_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
	"github.com/batonhq/baton/cmd/baton/ui"
	"github.com/batonhq/baton/internal/embedetcd/etcdtest"
	"github.com/batonhq/baton/mutex"
)

// TestUIStateShowsASetsKeyAsTheHolder: the page's state counts a set's key
// as the lock's holder, and a plain waiter behind it as a waiter.
func TestUIStateShowsASetsKeyAsTheHolder(t *testing.T) {
	ns := fmt.Sprintf("ui-set-%d", time.Now().UnixNano())
	st := startUIState(t, ns)
	ctx := etcdtest.Context(t, 20*time.Second)
	s, err := mutex.NewSet(clitest.Srv.Client(t), []string{"a", "b"}, mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l, err := s.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mutex.New(clitest.Srv.Client(t), "a", mutex.WithNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	go func() {
		if pl, err := m.Lock(ctx); err == nil {
			_ = pl.Unlock(context.Background())
		}
	}()
	waitSnapshot(t, st, "the set's key holds a, the plain lock waits", func(s ui.Snapshot) bool {
		for _, o := range s.Objects {
			if o.Kind == "lock" && o.Name == "a" {
				return len(o.Queue) == 2 && o.Holders == 1 && o.Waiters == 1 && o.Queue[0].Holding && o.Queue[0].Token == int64(l.Token())
			}
		}
		return false
	})
	_ = l.Unlock(ctx)
}
