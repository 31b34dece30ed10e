package operate

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/keys"
)

// A semaphore or a read/write lock has several holders at once, so
// `baton unlock NAME --holder-key KEY` names the one to force by its key. Only a
// holder's key is deleted, never a waiter's: a key that held stays
// holding until it is deleted (older keys only leave), so the
// transaction's guard on its CreateRevision is enough.

func addForceKeyFlag(cmd *cobra.Command, o *forceOptions) {
	cmd.Flags().StringVar(&o.key, "holder-key", "", "the holder's key, as baton locks shows it: required for a semaphore's permit or a read/write lock's holder")
}

// validateForceKey checks before connecting that key is a contender key
// of name in namespace ns, of a kind unlock forces.
func validateForceKey(ns, name, key string) error {
	if key == "" {
		return nil
	}
	p, _, err := keys.ParseTagged(ns, key)
	if err != nil {
		return cmdutil.UsageErrorf("--holder-key %s is not a holder's key of namespace %s", cmdutil.Safe(key), cmdutil.SafeQ(ns))
	}
	switch {
	case p.Kind != keys.Lock && p.Kind != keys.Semaphore && p.Kind != keys.RWLock:
		return cmdutil.UsageErrorf("--holder-key %s is a key of an %s, not of a lock: use baton resign", cmdutil.Safe(key), cmdutil.Safe(string(p.Kind)))
	case p.Name != name:
		return cmdutil.UsageErrorf("--holder-key %s belongs to %s, not to %s", cmdutil.Safe(key), cmdutil.SafeQ(p.Name), cmdutil.SafeQ(name))
	}
	return nil
}

// readForceTarget is the holder unlock forces: the mutex's without a key,
// else the holder with that key (the zero holder if it does not hold).
func readForceTarget(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, name, key string) (holder, error) {
	if key == "" {
		return readHolder(ctx, cli, ns, kind, name)
	}
	p, _, err := keys.ParseTagged(ns, key)
	if err != nil {
		return holder{}, err
	}
	if p.Kind == keys.Lock {
		h, err := readHolder(ctx, cli, ns, keys.Lock, name)
		if err != nil || h.Key != key {
			return holder{}, err
		}
		return h, nil
	}
	hs, err := taggedHolders(ctx, cli, ns, p.Kind, name)
	if err != nil {
		return holder{}, err
	}
	for _, h := range hs {
		if h.Key == key {
			return h, nil
		}
	}
	return holder{}, nil
}

// taggedHolders are the holders of the semaphore or read/write lock name.
func taggedHolders(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, name string) ([]holder, error) {
	rows, err := keyspace.ListTagged(ctx, cli, ns, kind, name)
	if err != nil {
		return nil, err
	}
	var out []holder
	for _, r := range rows {
		if r.Name == name {
			out = append(out, holder{Kind: kind, Name: name, Key: r.Holder.Key, Token: int64(r.Holder.Token),
				Lease: r.Holder.Lease, Identity: r.Holder.Identity})
		}
	}
	return out, nil
}

// heldAsTagged explains, when the lock name is not held, that a semaphore
// or read/write lock of that name is, and lists its holders' keys for
// --holder-key.
func heldAsTagged(ctx context.Context, g *cmdutil.Env, cli *clientv3.Client, kind keys.Kind, name string) error {
	if kind != keys.Lock {
		return nil
	}
	octx, cancel := g.OpContext(ctx)
	defer cancel()
	for _, k := range []keys.Kind{keys.Semaphore, keys.RWLock} {
		hs, err := taggedHolders(octx, cli, g.Namespace, k, name)
		if err != nil || len(hs) == 0 {
			continue
		}
		var b strings.Builder
		for _, h := range hs {
			fmt.Fprintf(&b, "\n  --holder-key %s  (holder %s, token %d)", safeArg(h.Key), cmdutil.Safe(cmdutil.Dash(h.Identity)), h.Token)
		}
		return cmdutil.UsageErrorf("lock %s is not held, but %s %s has %d holder(s): name the one to force with --holder-key%s",
			cmdutil.SafeQ(name), k, cmdutil.SafeQ(name), len(hs), b.String())
	}
	return nil
}

// taggedWhat names a semaphore's or read/write lock's holder.
func taggedWhat(h holder) string {
	switch {
	case h.Kind == keys.Semaphore:
		return "a permit of semaphore " + cmdutil.SafeQ(h.Name)
	case keys.TagOf(h.Key) == keys.TagRead:
		return "a read lock of rwlock " + cmdutil.SafeQ(h.Name)
	}
	return "the write lock of rwlock " + cmdutil.SafeQ(h.Name)
}
