package inspect

import (
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/election"
)

// ObserveEvent is one line of `baton observe`.
type ObserveEvent struct {
	Time     time.Time
	Election string
	Leader   election.Leader
}

type ObserveJSON struct {
	Time     time.Time `json:"time"`
	Election string    `json:"election"`
	Leader   bool      `json:"has_leader"`
	Value    string    `json:"value,omitempty"`
	Key      string    `json:"key,omitempty"`
	Token    int64     `json:"token,omitempty"`
	Lease    string    `json:"lease,omitempty"`
	Priority int       `json:"priority,omitempty"`
	Version  string    `json:"version,omitempty"`
	Strategy string    `json:"strategy,omitempty"`
	Revision int64     `json:"revision"`
}

func WriteObserveEvent(w io.Writer, asJSON bool, ev ObserveEvent) error {
	l := ev.Leader
	if asJSON {
		out := ObserveJSON{Time: ev.Time.UTC(), Election: ev.Election, Leader: !l.IsZero(), Revision: l.Revision}
		if !l.IsZero() {
			out.Value, out.Key, out.Token, out.Lease = l.Value, l.Key, int64(l.Token), cmdutil.LeaseHex(int64(l.LeaseID))
			out.Priority, out.Version, out.Strategy = l.Priority, l.Version, l.Strategy.String()
		}
		return cmdutil.WriteJSONLine(w, out)
	}
	ts := ev.Time.UTC().Format("2006-01-02T15:04:05.000Z")
	if l.IsZero() {
		_, err := fmt.Fprintf(w, "%s  %s: no leader  (revision %d)\n", ts, cmdutil.Safe(ev.Election), l.Revision)
		return err
	}
	_, err := fmt.Fprintf(w, "%s  %s: leader %s  token %d  lease %s  key %s  priority %d  version %s  strategy %s  (revision %d)\n",
		ts, cmdutil.Safe(ev.Election), cmdutil.SafeQ(l.Value), l.Token, cmdutil.LeaseHex(int64(l.LeaseID)), cmdutil.Safe(l.Key), l.Priority, cmdutil.Safe(cmdutil.Dash(l.Version)), l.Strategy, l.Revision)
	return err
}

func NewCmdObserve(g *cmdutil.Env) *cobra.Command {
	return &cobra.Command{
		Use:   "observe NAME",
		Short: "Print the leader of an election, then every change (\"no leader\" included), until interrupted",
		Args:  cmdutil.Args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			_, e, done, err := g.OpenElection(ctx, a[0])
			if err != nil {
				return err
			}
			defer done()
			for l := range e.Observe(ctx) {
				if err := WriteObserveEvent(cmd.OutOrStdout(), g.JSON(), ObserveEvent{Time: g.IO.Now(), Election: a[0], Leader: l}); err != nil {
					return err
				}
			}
			return nil // interrupted
		},
	}
}
