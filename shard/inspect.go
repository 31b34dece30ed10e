package shard

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
)

// Inspect reads group's State without joining it and without knowing its
// count, for tools such as the baton CLI: the count is the live members'
// (the highest queued shard's ID + 1 when no member is live; 0 when the
// group has no key). Only WithNamespace among the options matters; the
// others are validated and ignored. It writes nothing and grants no lease.
func Inspect(ctx context.Context, cli *clientv3.Client, group string, opts ...Option) (State, error) {
	if err := keys.ValidateName("shard group name", group); err != nil {
		return State{}, err
	}
	cfg, err := config.Build(cli, opts)
	if err != nil {
		return State{}, err
	}
	prefix := GroupPrefix(cfg.Namespace, group)
	var resp *clientv3.GetResponse
	err = retry.Reads(ctx, func(ctx context.Context) (err error) {
		resp, err = cli.Get(ctx, prefix, clientv3.WithPrefix())
		return err
	})
	if err != nil {
		return State{}, fmt.Errorf("read shard group %q: %w", group, err)
	}
	count := 0
	probe := newView(prefix, MaxCount)
	probe.reset(resp.Kvs, resp.Header.Revision)
	for _, m := range probe.members {
		count = max(count, m.value.Count)
	}
	if count == 0 {
		for s, q := range probe.queues {
			if len(q) > 0 {
				count = s + 1
			}
		}
	}
	v := newView(prefix, min(count, MaxCount))
	v.reset(resp.Kvs, resp.Header.Revision)
	return v.state(), nil
}
