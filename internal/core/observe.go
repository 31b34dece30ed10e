package core

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/observe"
)

// Head is the oldest key of a queue at a revision, as Observe sends it.
type Head = observe.Head

// Observe sends conv of the head of o's queue as observe.Loop does, on a
// channel that closes when ctx ends, on Close, or after a value with Err
// set. track, if not nil, sees the whole queue at every revision first
// (see observe.Loop). Both are given the observing goroutine's ctx, which
// ends with it and on Close.
func Observe[T, S any](o *Owner[T], ctx context.Context, conv func(context.Context, Head) S, track func(context.Context, map[string]*mvccpb.KeyValue, int64)) <-chan S {
	return observe.Chan(ctx, o.Go, o.sess.cli, o.cfg.Prefix, conv, track,
		func(err error) { o.cfg.Logger.Error("observe: etcd refused the read", o.cfg.Fields(zap.Error(err))...) })
}
