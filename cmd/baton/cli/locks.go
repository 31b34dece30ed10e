package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

// lockRow is one line of `baton locks`.
type lockRow struct {
	Name    string
	Holder  mutex.Contender
	Since   time.Time // zero when unknown
	Waiters int
}

type locksView struct {
	Namespace string
	Prefix    string
	Locks     []lockRow
	Now       time.Time
}

type lockJSON struct {
	Name      string     `json:"name"`
	Holder    string     `json:"holder"`
	Key       string     `json:"key"`
	Token     int64      `json:"token"`
	Lease     string     `json:"lease"`
	TTLLeft   int64      `json:"ttl_left_seconds"`
	HeldSince *time.Time `json:"held_since"`
	HeldFor   *float64   `json:"held_for_seconds"`
	Waiters   int        `json:"waiters"`
}

func writeLocks(w io.Writer, asJSON bool, v locksView) error {
	if asJSON {
		out := struct {
			Namespace string     `json:"namespace"`
			Locks     []lockJSON `json:"locks"`
		}{Namespace: v.Namespace, Locks: []lockJSON{}}
		for _, l := range v.Locks {
			out.Locks = append(out.Locks, lockJSON{Name: l.Name, Holder: l.Holder.Identity, Key: l.Holder.Key,
				Token: int64(l.Holder.Token), Lease: leaseHex(int64(l.Holder.Lease)), TTLLeft: ttlSeconds(l.Holder.TTL),
				HeldSince: since(l.Since), HeldFor: sinceSeconds(v.Now, l.Since), Waiters: l.Waiters})
		}
		return writeJSON(w, out)
	}
	if len(v.Locks) == 0 {
		what := "no locks are held in namespace " + strconv.Quote(v.Namespace)
		if v.Prefix != "" {
			what += " under " + strconv.Quote(v.Prefix)
		}
		_, err := fmt.Fprintln(w, what)
		return err
	}
	t := newTable(w, "NAME", "HOLDER", "TOKEN", "TTL LEFT", "HELD FOR", "WAITERS", "KEY")
	for _, l := range v.Locks {
		t.row(l.Name, dash(l.Holder.Identity), l.Holder.Token.String(), ttlText(l.Holder.TTL),
			ageText(v.Now, l.Since), strconv.Itoa(l.Waiters), l.Holder.Key)
	}
	return t.flush()
}

func newLocksCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "locks [PREFIX]",
		Short: "List the locks of the namespace: name, holder, token, TTL left, held for, waiters",
		Long: `List every held lock of the namespace whose name starts with PREFIX.

"held for" is known only for holders that recorded when they acquired
(baton lock does); for others it shows "unknown": etcd itself keeps no
acquisition time.`,
		Args: args(0, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			prefix := ""
			if len(a) == 1 {
				prefix = a[0]
			}
			if g.fanOut(cmd) {
				return g.locksAcross(cmd, prefix)
			}
			ctx := cmd.Context()
			cli, err := g.client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			octx, cancel := g.opContext(ctx)
			defer cancel()
			infos, err := mutex.List(octx, cli, mutex.WithNamespace(g.namespace))
			if err != nil {
				return g.failed("list locks", err)
			}
			held, err := readHeld(octx, cli, g.namespace, keys.Lock, "")
			if err != nil {
				return g.failed("read acquisition records", err)
			}
			v := locksView{Namespace: g.namespace, Prefix: prefix, Now: g.io.Now()}
			for _, info := range infos {
				if !strings.HasPrefix(info.Name, prefix) {
					continue
				}
				v.Locks = append(v.Locks, lockRow{Name: info.Name, Holder: info.Holder,
					Since: heldLookup(held, info.Name, info.Holder.Lease), Waiters: len(info.Waiters)})
			}
			return writeLocks(cmd.OutOrStdout(), g.json(), v)
		},
	}
}
