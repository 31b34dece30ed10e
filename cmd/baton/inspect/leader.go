package inspect

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
)

// LeaderView is what `baton leader` shows.
type LeaderView struct {
	Election string
	Leader   *LeaderInfo
	Now      time.Time
}

type LeaderInfo struct {
	Value string
	Key   string
	Token int64
	Lease clientv3.LeaseID
	TTL   time.Duration
	Since time.Time // zero when unknown
}

type LeaderJSON struct {
	Election string       `json:"election"`
	Leader   *leaderJSONL `json:"leader"`
}

type leaderJSONL struct {
	Value        string     `json:"value"`
	Key          string     `json:"key"`
	Token        int64      `json:"token"`
	Lease        string     `json:"lease"`
	TTLLeft      int64      `json:"ttl_left_seconds"`
	LeadingSince *time.Time `json:"leading_since"`
	LeadingFor   *float64   `json:"leading_for_seconds"`
}

func WriteLeader(w io.Writer, asJSON bool, v LeaderView) error {
	if asJSON {
		out := LeaderJSON{Election: v.Election}
		if l := v.Leader; l != nil {
			out.Leader = &leaderJSONL{Value: l.Value, Key: l.Key, Token: l.Token, Lease: cmdutil.LeaseHex(int64(l.Lease)),
				TTLLeft: cmdutil.TTLSeconds(l.TTL), LeadingSince: cmdutil.Since(l.Since), LeadingFor: cmdutil.SinceSeconds(v.Now, l.Since)}
		}
		return cmdutil.WriteJSON(w, out)
	}
	if v.Leader == nil {
		_, err := fmt.Fprintf(w, "election %s has no leader\n", cmdutil.SafeQ(v.Election))
		return err
	}
	l := v.Leader
	sinceText := "unknown (not started by baton elect)"
	if !l.Since.IsZero() {
		sinceText = l.Since.UTC().Format(time.RFC3339) + " (" + cmdutil.AgeText(v.Now, l.Since) + " ago)"
	}
	t := cmdutil.NewTable(w, "FIELD", "VALUE")
	t.Row("election", cmdutil.Safe(v.Election))
	t.Row("leader", cmdutil.Safe(l.Value))
	t.Row("token", strconv.FormatInt(l.Token, 10))
	t.Row("key", cmdutil.Safe(l.Key))
	t.Row("lease", cmdutil.LeaseHex(int64(l.Lease)))
	t.Row("ttl left", cmdutil.TTLText(l.TTL))
	t.Row("leading since", sinceText)
	return t.Flush()
}

func NewCmdLeader(g *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "leader NAME",
		Short: "Show the leader of an election: value, token, key, lease, TTL left, leading since",
		Args:  cmdutil.Args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			cli, e, done, err := g.OpenElection(ctx, a[0])
			if err != nil {
				return err
			}
			defer done()
			octx, cancel := g.OpContext(ctx)
			defer cancel()
			v := LeaderView{Election: a[0]}
			l, err := e.Leader(octx)
			switch {
			case errors.Is(err, election.ErrNoLeader):
			case err != nil:
				return g.Failed("read leader", err)
			default:
				info := &LeaderInfo{Value: l.Value, Key: l.Key, Token: int64(l.Token), Lease: l.LeaseID, TTL: -1}
				if resp, err := cli.TimeToLive(octx, l.LeaseID); err == nil && resp.TTL >= 0 {
					info.TTL = time.Duration(resp.TTL) * time.Second
				}
				if held, err := keyspace.ReadHeld(octx, cli, g.Namespace, keys.Election, a[0]); err == nil {
					info.Since = keyspace.HeldLookup(held, a[0], l.LeaseID)
				}
				v.Leader = info
			}
			v.Now = g.IO.Now()
			return WriteLeader(cmd.OutOrStdout(), g.JSON(), v)
		},
	}
}

// CandidatesView is what `baton candidates` shows: the queue, leader first.
type CandidatesView struct {
	Election   string
	Candidates []election.Candidate
}

type CandidateJSON struct {
	Position int    `json:"position"`
	Leader   bool   `json:"leader"`
	Value    string `json:"value"`
	Priority int    `json:"priority"`
	Version  string `json:"version"`
	Strategy string `json:"strategy"`
	Key      string `json:"key"`
	Token    int64  `json:"token"`
	Lease    string `json:"lease"`
	TTLLeft  int64  `json:"ttl_left_seconds"`
	Record   string `json:"record,omitempty"`
}

func WriteCandidates(w io.Writer, asJSON bool, v CandidatesView) error {
	if asJSON {
		out := struct {
			Election   string          `json:"election"`
			Candidates []CandidateJSON `json:"candidates"`
		}{Election: v.Election, Candidates: []CandidateJSON{}}
		for i, c := range v.Candidates {
			out.Candidates = append(out.Candidates, CandidateJSON{Position: i + 1, Leader: c.Leader, Value: c.Value,
				Priority: c.Priority, Version: c.Version, Strategy: c.Strategy.String(), Key: c.Key, Token: int64(c.Token),
				Lease: cmdutil.LeaseHex(int64(c.LeaseID)), TTLLeft: cmdutil.TTLSeconds(c.TTL), Record: c.Record})
		}
		return cmdutil.WriteJSON(w, out)
	}
	if len(v.Candidates) == 0 {
		_, err := fmt.Fprintf(w, "election %s has no candidates\n", cmdutil.SafeQ(v.Election))
		return err
	}
	t := cmdutil.NewTable(w, "#", "ROLE", "VALUE", "PRIORITY", "VERSION", "STRATEGY", "TOKEN", "LEASE", "TTL LEFT", "KEY")
	for i, c := range v.Candidates {
		role, token := "waiting", c.Token.String()
		if c.Leader {
			role = "leader"
		}
		if c.Token == 0 {
			token = "-" // a waiting Preferred candidate gets a fresh token when it leads
		}
		t.Row(strconv.Itoa(i+1), role, cmdutil.Safe(cmdutil.Dash(c.Value)), strconv.Itoa(c.Priority), cmdutil.Safe(cmdutil.Dash(c.Version)), c.Strategy.String(),
			token, cmdutil.LeaseHex(int64(c.LeaseID)), cmdutil.TTLText(c.TTL), cmdutil.Safe(c.Key))
	}
	return t.Flush()
}

func NewCmdCandidates(g *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "candidates NAME",
		Short: "Show the candidates of an election, the leader first: priority, version, strategy, token, TTL left",
		Long: `Show the candidates of election NAME, the leader first. Under the oldest
strategy (the default, etcd's) they are the queue in campaign order. Under
the preferred strategy they are the leader, then the live candidates best
first (priority, then the lowest version, then age); a waiting preferred
candidate has no token yet ("-"): it gets a fresh one when it leads. The
KEY column is what "baton resign NAME --to KEY" takes.`,
		Args: cmdutil.Args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			_, e, done, err := g.OpenElection(ctx, a[0])
			if err != nil {
				return err
			}
			defer done()
			octx, cancel := g.OpContext(ctx)
			defer cancel()
			cands, err := e.Candidates(octx)
			if err != nil {
				return g.Failed("read candidates", err)
			}
			return WriteCandidates(cmd.OutOrStdout(), g.JSON(), CandidatesView{Election: a[0], Candidates: cands})
		},
	}
}
