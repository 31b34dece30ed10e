package shard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
	"github.com/batonhq/baton/shard"
)

// TestMaxHeldBelowTheCountRefused: a member alone in its group owns every
// shard, one key each on its session, so a WithMaxHeld below the count
// would leave shards that every member assigns to it and it can never
// take. New refuses it, naming both numbers, whether the cap is the
// Group's own session's or a shared session's; a cap of the count is
// accepted.
func TestMaxHeldBelowTheCountRefused(t *testing.T) {
	cli := client(t)
	sess, err := session.New(cli, session.WithMaxHeld(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	for _, tc := range []struct {
		what string
		opts []shard.Option
	}{
		{"own session", []shard.Option{shard.WithMaxHeld(5)}},
		{"shared session", []shard.Option{shard.WithSession(sess)}},
	} {
		t.Run(tc.what, func(t *testing.T) {
			_, err := shard.New(cli, "maxheld", 8, tc.opts...)
			if !errors.Is(err, shard.ErrInvalid) || !strings.Contains(err.Error(), "WithMaxHeld(5)") || !strings.Contains(err.Error(), "8 shards") {
				t.Fatalf("New with a cap of 5 keys for 8 shards: %v, want ErrInvalid naming 5 and 8", err)
			}
		})
	}
	g, err := shard.New(cli, "maxheld", 5, shard.WithSession(sess))
	if err != nil {
		t.Fatalf("New with a cap of the count: %v", err)
	}
	_ = g.Close()
}

// TestMaxHeldReachedByOtherKeysIsWarned: a shared session at its cap
// because of another primitive's key cannot take the group's last shard;
// Run keeps trying, and says so at Warn (once, not per attempt), naming
// the shard and the cap.
func TestMaxHeldReachedByOtherKeysIsWarned(t *testing.T) {
	cli := client(t)
	core, logs := observer.New(zapcore.DebugLevel)
	sess, err := session.New(cli, session.WithMaxHeld(4), session.WithLogger(zap.New(core)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	mu, err := mutex.New(cli, "maxheld-other", mutex.WithSession(sess))
	if err != nil {
		t.Fatal(err)
	}
	l, err := mu.Lock(etcdtest.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	g := newGroup(t, cli, "maxheld-warn", 4, shard.WithSession(sess))
	m := start(t, g, "a", &eventLog{}, nil)
	waitFor(t, func() bool { return m.count() == 3 }, "three of the four shards to start")
	waitFor(t, func() bool {
		return logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("WithMaxHeld").Len() > 0
	}, "a warning that the session's cap keeps a shard from this member")
	w := logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("WithMaxHeld").All()[0]
	if f := w.ContextMap(); f["shard"] == nil || f["max_held"] != int64(4) {
		t.Errorf("the warning's fields: %v, want the shard and max_held 4", f)
	}
	// The mutex lets go: the member takes the last shard.
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return m.count() == 4 }, "the last shard to start once the session has room")
	if n := logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("WithMaxHeld").Len(); n != 1 {
		t.Errorf("%d warnings for one stretch at the cap, want 1", n)
	}
}
