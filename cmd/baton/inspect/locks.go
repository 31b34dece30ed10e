package inspect

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/keys"
)

type LocksView struct {
	Namespace string
	Prefix    string
	Locks     []keyspace.LockRow
	Delays    []keyspace.DelayRow // running lock-delays
	Now       time.Time
}

type LockJSON struct {
	Name      string     `json:"name"`
	Kind      string     `json:"kind,omitempty"`
	Holders   int        `json:"holders,omitempty"`
	Limit     int        `json:"limit,omitempty"`
	Holder    string     `json:"holder"`
	Key       string     `json:"key"`
	Token     int64      `json:"token"`
	Lease     string     `json:"lease"`
	TTLLeft   int64      `json:"ttl_left_seconds"`
	HeldSince *time.Time `json:"held_since"`
	HeldFor   *float64   `json:"held_for_seconds"`
	Waiters   int        `json:"waiters"`
	Set       []string   `json:"set,omitempty"`
	// Release is the release request pending to this holder.
	Release *releaseJSON `json:"release_request,omitempty"`
	// Unread: the holder's key is of a form this build does not write.
	Unread bool `json:"unread_key,omitempty"`
}

func WriteLocks(w io.Writer, asJSON bool, v LocksView) error {
	if asJSON {
		out := struct {
			Namespace string      `json:"namespace"`
			Count     int         `json:"count"`
			Locks     []LockJSON  `json:"locks"`
			Delays    []DelayJSON `json:"lock_delays"`
		}{Namespace: v.Namespace, Count: len(v.Locks), Locks: []LockJSON{}, Delays: delaysJSON(v.Delays)}
		for _, l := range v.Locks {
			out.Locks = append(out.Locks, lockJSONOf(l, v.Now))
		}
		return cmdutil.WriteJSON(w, out)
	}
	if len(v.Locks) == 0 {
		what := "no locks are held in namespace " + cmdutil.SafeQ(v.Namespace)
		if v.Prefix != "" {
			what += " under " + cmdutil.SafeQ(v.Prefix)
		}
		if _, err := fmt.Fprintln(w, what); err != nil {
			return err
		}
		return writeLockState(w, nil, v.Delays)
	}
	t := cmdutil.NewTable(w, "NAME", "KIND", "HOLDERS", "HOLDER", "TOKEN", "TTL LEFT", "HELD FOR", "WAITERS", "KEY")
	objects := make(map[[2]string]bool)
	for _, l := range v.Locks {
		objects[[2]string{l.Name, string(keyspace.HeldKindOf(l))}] = true
		t.Row(cmdutil.Safe(l.Name), keyspace.RowKind(l), holdersCell(l), cmdutil.Safe(cmdutil.Dash(l.Holder.Identity)), l.Holder.Token.String(), cmdutil.TTLText(l.Holder.TTL),
			cmdutil.AgeText(v.Now, l.Since), strconv.Itoa(l.Waiters), cmdutil.Safe(l.Holder.Key))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	if err := writeSets(w, v.Locks); err != nil {
		return err
	}
	for _, l := range v.Locks {
		if l.Unread {
			if _, err := fmt.Fprintf(w, "lock %s: the holder's key is of a form this build does not write (a newer release's?): it holds by its revision, as every contender orders the queue\n", cmdutil.SafeQ(l.Name)); err != nil {
				return err
			}
		}
	}
	if err := writeLockState(w, v.Locks, v.Delays); err != nil {
		return err
	}
	if len(objects) == len(v.Locks) {
		_, err := fmt.Fprintf(w, "%d lock(s)\n", len(v.Locks))
		return err
	}
	_, err := fmt.Fprintf(w, "%d lock(s), %d holder(s)\n", len(objects), len(v.Locks))
	return err
}

func NewCmdLocks(g *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "locks [PREFIX]",
		Short: "List the locks of the namespace: name, kind, holders, token, TTL left, held for, waiters",
		Long: `List every held lock of the namespace whose name starts with PREFIX, and
how many. etcd filters by PREFIX; the holders' lease TTLs are asked in
parallel.

KIND is mutex (baton lock, package mutex), semaphore (baton lock --limit,
package semaphore) or rwlock read / rwlock write (baton lock --shared,
package rwmutex). A semaphore or a read lock has a line per holder;
HOLDERS says how many hold it (of the limit, for a semaphore). The same
name under two kinds names two objects that never wait for each other.

"held for" is known only for holders that recorded when they acquired
(baton lock does); for others it shows "unknown": etcd itself keeps no
acquisition time.

Below the table: each lock-delay running (after a holder was lost without
releasing, the time left on etcd's clock before anyone with a lock-delay
acquires) and each release request pending to a holder (who asked, when,
and why, as they wrote it).`,
		Args: cmdutil.Args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			prefix := ""
			if len(a) == 1 {
				prefix = a[0]
			}
			if g.FanOut(cmd) {
				return locksAcross(g, cmd, prefix)
			}
			ctx := cmd.Context()
			cli, octx, done, err := g.OpClient(ctx)
			if err != nil {
				return err
			}
			defer done()
			v, what, err := readLocks(octx, cli, g.Namespace, prefix)
			if err != nil {
				return g.Failed(what, err)
			}
			v.Now = g.IO.Now()
			return WriteLocks(cmd.OutOrStdout(), g.JSON(), v)
		},
	}
}

// readLocks reads what baton locks shows of namespace ns (without Now);
// on error, what names the read that failed.
func readLocks(ctx context.Context, cli *clientv3.Client, ns, prefix string) (v LocksView, what string, err error) {
	v = LocksView{Namespace: ns, Prefix: prefix}
	if v.Locks, err = keyspace.ListLocks(ctx, cli, ns, prefix); err != nil {
		return v, "list locks", err
	}
	held := make(map[keys.Kind]map[string]time.Time)
	for _, k := range []keys.Kind{keys.Lock, keys.Semaphore, keys.RWLock} {
		if held[k], err = keyspace.ReadHeld(ctx, cli, ns, k, ""); err != nil {
			return v, "read acquisition records", err
		}
	}
	for i := range v.Locks {
		v.Locks[i].Since = keyspace.HeldLookup(held[keyspace.HeldKindOf(v.Locks[i])], v.Locks[i].Name, v.Locks[i].Holder.Lease)
	}
	if err := keyspace.FillReleases(ctx, cli, ns, v.Locks); err != nil {
		return v, "read release requests", err
	}
	if v.Delays, err = keyspace.ListDelays(ctx, cli, ns, prefix); err != nil {
		return v, "read lock-delays", err
	}
	return v, "", nil
}

// lockJSONOf is one row of baton locks -o json.
func lockJSONOf(l keyspace.LockRow, now time.Time) LockJSON {
	return LockJSON{Name: l.Name, Kind: keyspace.RowKind(l), Holders: max(l.Holders, 1), Limit: l.Limit,
		Holder: l.Holder.Identity, Key: l.Holder.Key,
		Token: int64(l.Holder.Token), Lease: cmdutil.LeaseHex(int64(l.Holder.Lease)), TTLLeft: cmdutil.TTLSeconds(l.Holder.TTL),
		HeldSince: cmdutil.Since(l.Since), HeldFor: cmdutil.SinceSeconds(now, l.Since), Waiters: l.Waiters, Set: l.Set, Release: releaseOf(l.Release), Unread: l.Unread}
}

// holdersCell is the HOLDERS cell: how many hold, and of what limit.
func holdersCell(r keyspace.LockRow) string {
	switch {
	case r.Kind == keyspace.KindSemaphore && r.Limit > 0:
		return strconv.Itoa(r.Holders) + "/" + strconv.Itoa(r.Limit)
	case r.Kind == keyspace.KindSemaphore:
		return strconv.Itoa(r.Holders) + "/?"
	case r.Holders == 0:
		return "1"
	}
	return strconv.Itoa(r.Holders)
}
