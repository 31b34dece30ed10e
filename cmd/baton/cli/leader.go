package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
)

// leaderView is what `baton leader` shows.
type leaderView struct {
	Election string
	Leader   *leaderInfo
	Now      time.Time
}

type leaderInfo struct {
	Value string
	Key   string
	Token int64
	Lease clientv3.LeaseID
	TTL   time.Duration
	Since time.Time // zero when unknown
}

type leaderJSON struct {
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

func writeLeader(w io.Writer, asJSON bool, v leaderView) error {
	if asJSON {
		out := leaderJSON{Election: v.Election}
		if l := v.Leader; l != nil {
			out.Leader = &leaderJSONL{Value: l.Value, Key: l.Key, Token: l.Token, Lease: leaseHex(int64(l.Lease)),
				TTLLeft: ttlSeconds(l.TTL), LeadingSince: since(l.Since), LeadingFor: sinceSeconds(v.Now, l.Since)}
		}
		return writeJSON(w, out)
	}
	if v.Leader == nil {
		_, err := fmt.Fprintf(w, "election %s has no leader\n", safeQ(v.Election))
		return err
	}
	l := v.Leader
	sinceText := "unknown (not started by baton elect)"
	if !l.Since.IsZero() {
		sinceText = l.Since.UTC().Format(time.RFC3339) + " (" + ageText(v.Now, l.Since) + " ago)"
	}
	t := newTable(w, "FIELD", "VALUE")
	t.row("election", safe(v.Election))
	t.row("leader", safe(l.Value))
	t.row("token", strconv.FormatInt(l.Token, 10))
	t.row("key", safe(l.Key))
	t.row("lease", leaseHex(int64(l.Lease)))
	t.row("ttl left", ttlText(l.TTL))
	t.row("leading since", sinceText)
	return t.flush()
}

func newLeaderCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "leader NAME",
		Short: "Show the leader of an election: value, token, key, lease, TTL left, leading since",
		Args:  args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			cli, e, done, err := g.openElection(ctx, a[0])
			if err != nil {
				return err
			}
			defer done()
			octx, cancel := g.opContext(ctx)
			defer cancel()
			v := leaderView{Election: a[0]}
			l, err := e.Leader(octx)
			switch {
			case errors.Is(err, election.ErrNoLeader):
			case err != nil:
				return g.failed("read leader", err)
			default:
				info := &leaderInfo{Value: l.Value, Key: l.Key, Token: int64(l.Token), Lease: l.LeaseID, TTL: -1}
				if resp, err := cli.TimeToLive(octx, l.LeaseID); err == nil && resp.TTL >= 0 {
					info.TTL = time.Duration(resp.TTL) * time.Second
				}
				if held, err := readHeld(octx, cli, g.namespace, keys.Election, a[0]); err == nil {
					info.Since = heldLookup(held, a[0], l.LeaseID)
				}
				v.Leader = info
			}
			v.Now = g.io.Now()
			return writeLeader(cmd.OutOrStdout(), g.json(), v)
		},
	}
}

// candidatesView is what `baton candidates` shows: the queue, leader first.
type candidatesView struct {
	Election   string
	Candidates []election.Candidate
}

type candidateJSON struct {
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

func writeCandidates(w io.Writer, asJSON bool, v candidatesView) error {
	if asJSON {
		out := struct {
			Election   string          `json:"election"`
			Candidates []candidateJSON `json:"candidates"`
		}{Election: v.Election, Candidates: []candidateJSON{}}
		for i, c := range v.Candidates {
			out.Candidates = append(out.Candidates, candidateJSON{Position: i + 1, Leader: c.Leader, Value: c.Value,
				Priority: c.Priority, Version: c.Version, Strategy: c.Strategy.String(), Key: c.Key, Token: int64(c.Token),
				Lease: leaseHex(int64(c.LeaseID)), TTLLeft: ttlSeconds(c.TTL), Record: c.Record})
		}
		return writeJSON(w, out)
	}
	if len(v.Candidates) == 0 {
		_, err := fmt.Fprintf(w, "election %s has no candidates\n", safeQ(v.Election))
		return err
	}
	t := newTable(w, "#", "ROLE", "VALUE", "PRIORITY", "VERSION", "STRATEGY", "TOKEN", "LEASE", "TTL LEFT", "KEY")
	for i, c := range v.Candidates {
		role, token := "waiting", c.Token.String()
		if c.Leader {
			role = "leader"
		}
		if c.Token == 0 {
			token = "-" // a waiting Preferred candidate gets a fresh token when it leads
		}
		t.row(strconv.Itoa(i+1), role, safe(dash(c.Value)), strconv.Itoa(c.Priority), safe(dash(c.Version)), c.Strategy.String(),
			token, leaseHex(int64(c.LeaseID)), ttlText(c.TTL), safe(c.Key))
	}
	return t.flush()
}

func newCandidatesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "candidates NAME",
		Short: "Show the candidates of an election, the leader first: priority, version, strategy, token, TTL left",
		Long: `Show the candidates of election NAME, the leader first. Under the oldest
strategy (the default, etcd's) they are the queue in campaign order. Under
the preferred strategy they are the leader, then the live candidates best
first (priority, then the lowest version, then age); a waiting preferred
candidate has no token yet ("-"): it gets a fresh one when it leads. The
KEY column is what "baton resign NAME --to KEY" takes.`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx := cmd.Context()
			_, e, done, err := g.openElection(ctx, a[0])
			if err != nil {
				return err
			}
			defer done()
			octx, cancel := g.opContext(ctx)
			defer cancel()
			cands, err := e.Candidates(octx)
			if err != nil {
				return g.failed("read candidates", err)
			}
			return writeCandidates(cmd.OutOrStdout(), g.json(), candidatesView{Election: a[0], Candidates: cands})
		},
	}
}
