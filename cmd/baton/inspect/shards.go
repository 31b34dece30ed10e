package inspect

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/shard"
)

// WriteShards prints a group: one row per shard, or per member with
// members; now is the time "held for" is counted to.
func WriteShards(w io.Writer, asJSON, members bool, v keyspace.ShardsJSON, now time.Time) error {
	if members {
		v.Owners = nil
	}
	if asJSON {
		return cmdutil.WriteJSON(w, v)
	}
	if v.Count == 0 {
		_, err := fmt.Fprintf(w, "shard group %s has no member and no shard key\n", cmdutil.SafeQ(v.Group))
		return err
	}
	if members {
		t := cmdutil.NewTable(w, "MEMBER", "OWNS")
		for _, m := range v.Members {
			t.Row(cmdutil.Safe(m.Member), strconv.Itoa(m.Owns))
		}
		t.Row("(unowned)", strconv.Itoa(v.Unowned))
		return t.Flush()
	}
	t := cmdutil.NewTable(w, "SHARD", "OWNER", "TOKEN", "HELD FOR", "KEY")
	for _, o := range v.Owners {
		tok, held := "-", "-"
		if o.Token > 0 {
			tok, held = o.Token.String(), cmdutil.AgeText(now, timeOf(o.HeldSince))
		}
		t.Row(strconv.Itoa(o.Shard), cmdutil.Dash(cmdutil.Safe(o.Member)), tok, held, cmdutil.Dash(cmdutil.Safe(o.Key)))
	}
	return t.Flush()
}

func timeOf(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// NewCmdShards is `baton shards GROUP`.
func NewCmdShards(g *cmdutil.Env) *cobra.Command {
	var members bool
	cmd := &cobra.Command{
		Use:   "shards GROUP",
		Short: "Show a shard group: each shard's owner, token and held for, or (--members) each member and how many shards it owns",
		Long: `Show the shard group GROUP (package shard) as etcd holds it now, without
joining it: one row per shard with its owner, fencing token, how long the
owner has held it and its key, or with --members one row per live member
and how many shards it owns, and how many are unowned.

"held for" is known only for owners that recorded when they took the shard
(baton shard does); for others it shows "unknown", as in baton locks: etcd
itself keeps no acquisition time.`,
		Args: cmdutil.Args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			cli, octx, done, err := g.OpClient(ctx)
			if err != nil {
				return err
			}
			defer done()
			st, err := shard.Inspect(octx, cli, a[0], shard.WithNamespace(g.Namespace))
			if err != nil {
				return g.Failed("read shard group", err)
			}
			held, err := keyspace.ReadHeld(octx, cli, g.Namespace, keys.Shard, "")
			if err != nil {
				return g.Failed("read acquisition records", err)
			}
			now := g.IO.Now()
			return WriteShards(cmd.OutOrStdout(), g.JSON(), members, keyspace.ShardsView(a[0], st, held, now), now)
		},
	}
	cmd.Flags().BoolVar(&members, "members", false, "one row per live member: how many shards it owns, and the unowned")
	return cmd
}
