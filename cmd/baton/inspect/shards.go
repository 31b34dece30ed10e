package inspect

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/shard"
)

// ShardsJSON is what `baton shards -o json` prints.
type ShardsJSON struct {
	Group    string        `json:"group"`
	Revision int64         `json:"revision"`
	Count    int           `json:"count"`
	Members  []MemberJSON  `json:"members"`
	Unowned  int           `json:"unowned"`
	Owners   []shard.Owner `json:"owners,omitempty"`
}

// MemberJSON is one live member and how many shards it owns.
type MemberJSON struct {
	Member string `json:"member"`
	Owns   int    `json:"owns"`
}

// ShardsView summarizes a group's State.
func ShardsView(group string, st shard.State) ShardsJSON {
	out := ShardsJSON{Group: group, Revision: st.Revision, Count: len(st.Owners), Owners: st.Owners, Members: []MemberJSON{}}
	owns := map[string]int{}
	for _, o := range st.Owners {
		if o.Member == "" {
			out.Unowned++
		}
		owns[o.Member]++
	}
	for _, m := range st.Members {
		out.Members = append(out.Members, MemberJSON{Member: m, Owns: owns[m]})
	}
	return out
}

// WriteShards prints a group: one row per shard, or per member with
// members.
func WriteShards(w io.Writer, asJSON, members bool, v ShardsJSON) error {
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
	t := cmdutil.NewTable(w, "SHARD", "OWNER", "TOKEN", "KEY")
	for _, o := range v.Owners {
		tok := "-"
		if o.Token > 0 {
			tok = o.Token.String()
		}
		t.Row(strconv.Itoa(o.Shard), cmdutil.Dash(cmdutil.Safe(o.Member)), tok, cmdutil.Dash(cmdutil.Safe(o.Key)))
	}
	return t.Flush()
}

// NewCmdShards is `baton shards GROUP`.
func NewCmdShards(g *cmdutil.Env) *cobra.Command {
	var members bool
	cmd := &cobra.Command{
		Use:   "shards GROUP",
		Short: "Show a shard group: each shard's owner and token, or (--members) each member and how many shards it owns",
		Args:  cmdutil.Args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			cli, err := g.Client(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			octx, cancel := g.OpContext(ctx)
			defer cancel()
			st, err := shard.Inspect(octx, cli, a[0], shard.WithNamespace(g.Namespace))
			if err != nil {
				return g.Failed("read shard group", err)
			}
			return WriteShards(cmd.OutOrStdout(), g.JSON(), members, ShardsView(a[0], st))
		},
	}
	cmd.Flags().BoolVar(&members, "members", false, "one row per live member: how many shards it owns, and the unowned")
	return cmd
}
