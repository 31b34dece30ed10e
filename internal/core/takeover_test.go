package core

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

// A Campaign that takes over its session's key while the term it replaces
// is still releasing must keep the key's reservation: the release ending
// after the takeover must not free it, or a third acquisition of the
// session reserves the key afresh and adopts the same incarnation — two
// holders of one token, the second never told. Forced: the term's release
// is slowed by the proxy and holds the term's lock when the takeover comes.
func TestReleaseEndingAfterATakeoverKeepsTheNewReservation(t *testing.T) {
	pcli, px := srv.Proxied(t)
	ctx := context.Background()
	s := NewSession(pcli, Config{TTL: 30 * time.Second})
	defer s.Close()
	prefix := keys.Prefix("core-test", keys.Election, "takeover")
	o := NewOwner[*Hold](s, OwnerConfig{Prefix: prefix, Errs: &Errors{NotHeld: errs.ErrReleased}, Own: true,
		Recorder: metrics.Recorder{Logger: zap.NewNop(), Kind: metrics.Election}})
	defer o.Close()
	a, err := o.Acquire(ctx, Request{Value: "a"}, func(h *Hold) *Hold { return h })
	if err != nil {
		t.Fatal(err)
	}
	px.SetDelay(300 * time.Millisecond)
	released := make(chan error, 1)
	go func() { released <- Release(ctx, a) }()
	for i := 0; ; i++ { // the release holds the term's lock for its delete
		if !a.mu.TryLock() {
			break
		}
		a.mu.Unlock()
		if i == 1000 {
			t.Fatal("the release never took the term's lock")
		}
		time.Sleep(time.Millisecond)
	}
	r, err := s.reserve(ctx, a.key, false, true) // a Campaign taking the key over
	if err != nil {
		t.Fatal(err)
	}
	<-released
	px.SetDelay(0)
	s.mu.Lock()
	kept := s.reserved[a.key] == r && r.key == a.key
	s.mu.Unlock()
	if !kept {
		t.Fatal("the release of the replaced term freed the reservation the takeover got: a third acquisition can adopt the same key")
	}
	s.free(r, nil)
}
