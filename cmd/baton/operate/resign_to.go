package operate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
)

// `baton resign NAME --to CANDIDATE` hands leadership to one candidate,
// named by its key or its identity: without --force it asks the leader to
// do it (the leader's Term is told and Run, or baton elect, hands over at
// once); with --force --reason the operator does it in one transaction
// with the audit record, after the checks of resign --force.

// Bounds of resign --to --deadline.
const (
	minRequestDeadline     = 2 * time.Second
	maxRequestDeadline     = 10 * time.Minute
	defaultRequestDeadline = 30 * time.Second
)

const ActionForceTransfer = "force-transfer"

func addResignToFlags(cmd *cobra.Command, o *forceOptions) {
	f := cmd.Flags()
	f.StringVar(&o.to, "to", "", "hand leadership to this candidate: its KEY or its identity, as baton candidates shows them")
	f.DurationVar(&o.deadline, "deadline", defaultRequestDeadline, "without --force: how long the leader has to hand over")
}

// validateResignTo checks --to and --deadline before connecting.
func validateResignTo(ns, name string, o forceOptions) error {
	if o.to == "" {
		return nil
	}
	if !strings.HasPrefix(o.to, "/") { // an identity, found among the candidates once connected
		return validateRequestDeadline(o)
	}
	p, err := keys.Parse(ns, o.to)
	switch {
	case err != nil || p.Kind != keys.Election:
		return cmdutil.UsageErrorf("--to %s is not a candidate's key of an election of namespace %s (see baton candidates)", cmdutil.Safe(o.to), cmdutil.SafeQ(ns))
	case p.Name != name:
		return cmdutil.UsageErrorf("--to %s belongs to election %s, not to %s", cmdutil.Safe(o.to), cmdutil.SafeQ(p.Name), cmdutil.SafeQ(name))
	}
	return validateRequestDeadline(o)
}

func validateRequestDeadline(o forceOptions) error {
	switch {
	case o.revokeLease:
		return cmdutil.UsageErrorf("--to and --revoke-lease cannot be combined: a hand-over deletes the leader's key only")
	case o.deadline < minRequestDeadline || o.deadline > maxRequestDeadline:
		return cmdutil.UsageErrorf("--deadline %v: must be at least %v and at most %v", o.deadline, minRequestDeadline, maxRequestDeadline)
	}
	return nil
}

// resolveCandidate returns the key of the candidate to names: to itself if it
// is a key, else the key of the one candidate (not the leader) whose
// identity is to.
func resolveCandidate(ctx context.Context, g *cmdutil.Env, e *election.Election, to string) (string, error) {
	if strings.HasPrefix(to, "/") {
		return to, nil
	}
	octx, cancel := g.OpContext(ctx)
	cands, err := e.Candidates(octx)
	cancel()
	if err != nil {
		return "", g.Failed("list the candidates", err)
	}
	var found []string
	for _, c := range cands {
		if c.Value == to && !c.Leader {
			found = append(found, c.Key)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no candidate of election %s waits with identity %s (see baton candidates %s)", cmdutil.SafeQ(e.Name()), cmdutil.SafeQ(to), safeArg(e.Name()))
	case 1:
		return found[0], nil
	}
	for i, k := range found {
		found[i] = cmdutil.Safe(k)
	}
	return "", cmdutil.WithCode(cmdutil.ExitUsage, fmt.Errorf("%d candidates of election %s wait with identity %s: name one by its key (%s)",
		len(found), cmdutil.SafeQ(e.Name()), cmdutil.SafeQ(to), strings.Join(found, ", ")))
}

// runResignRequest asks the leader to hand over to o.to and waits until
// leadership moved or the deadline passed.
func runResignRequest(cmd *cobra.Command, g *cmdutil.Env, o forceOptions, name string) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	_, e, done, err := g.OpenElection(ctx, name)
	if err != nil {
		return err
	}
	defer done()
	if o.to, err = resolveCandidate(ctx, g, e, o.to); err != nil {
		return err
	}
	osUser, host := cmdutil.WhoAmI()
	octx, cancel := g.OpContext(ctx)
	from, err := e.RequestEnd(octx, o.to, "baton resign by "+osUser+"@"+host, o.deadline)
	cancel()
	switch {
	case errors.Is(err, election.ErrNoLeader):
		return fmt.Errorf("election %s has no leader: nothing to hand over", cmdutil.SafeQ(name))
	case errors.Is(err, election.ErrForeignCandidate):
		return cmdutil.WithCode(cmdutil.ExitRefused, fmt.Errorf("not asked: %s", cmdutil.SafeMessage(err.Error())))
	case errors.Is(err, election.ErrNoCandidate):
		return fmt.Errorf("%s is not a live candidate of election %s: %s", cmdutil.Safe(o.to), cmdutil.SafeQ(name), cmdutil.SafeMessage(err.Error()))
	case err != nil:
		return g.Failed("ask the leader to hand over", err)
	}
	fmt.Fprintf(out, "asked leader %s (token %d, key %s) to hand over to %s within %v\n",
		cmdutil.Safe(cmdutil.Dash(from.Value)), from.Token, cmdutil.Safe(from.Key), cmdutil.Safe(o.to), o.deadline)
	wctx, wcancel := context.WithTimeout(ctx, o.deadline)
	defer wcancel()
	for l := range e.Observe(wctx) {
		switch {
		case l.Err != nil:
			return g.Failed("observe the election", l.Err)
		case l.Key == from.Key && l.Token == from.Token:
			continue
		case l.IsZero():
			continue // a preemption or a failed hand-over: wait for the next leader
		case l.Key == o.to:
			fmt.Fprintf(out, "%s leads (token %d, key %s)\n", cmdutil.Safe(cmdutil.Dash(l.Value)), l.Token, cmdutil.Safe(l.Key))
			return nil
		default:
			fmt.Fprintf(out, "leadership moved to %s (token %d, key %s), not to %s\n", cmdutil.Safe(cmdutil.Dash(l.Value)), l.Token, cmdutil.Safe(l.Key), cmdutil.Safe(o.to))
			return cmdutil.WithCode(cmdutil.ExitError, errors.New("leadership moved elsewhere"))
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Fprintf(out, "the leader did not hand over within %v; the request expires with its lease\n", o.deadline)
	return &cmdutil.CodedError{Code: cmdutil.ExitRefused, Err: errors.New("not handed over in time"), Silent: true}
}

// prepareForceTransfer checks the target before anything is watched.
func prepareForceTransfer(ctx context.Context, g *cmdutil.Env, cli *clientv3.Client, name string, h holder, to string) (election.HandOver, error) {
	e, err := election.New(cli, name, election.WithNamespace(g.Namespace))
	if err != nil {
		return election.HandOver{}, cmdutil.WithCode(cmdutil.ExitUsage, err)
	}
	defer e.Close()
	if to, err = resolveCandidate(ctx, g, e, to); err != nil {
		return election.HandOver{}, err
	}
	octx, cancel := g.OpContext(ctx)
	defer cancel()
	ho, err := e.PrepareHandOver(octx, to)
	switch {
	case errors.Is(err, election.ErrForeignCandidate):
		return ho, cmdutil.WithCode(cmdutil.ExitRefused, fmt.Errorf("nothing was forced: %s", cmdutil.SafeMessage(err.Error())))
	case errors.Is(err, election.ErrNoCandidate):
		return ho, fmt.Errorf("%s: %s", cmdutil.Safe(to), cmdutil.SafeMessage(err.Error()))
	case err != nil:
		return ho, g.Failed("prepare the hand-over", err)
	case ho.From.Key != h.Key || int64(ho.From.Token) != h.Token:
		return ho, fmt.Errorf("the leader changed meanwhile (now key %s): nothing was forced", cmdutil.Safe(ho.From.Key))
	}
	return ho, nil
}

// transferHolderKey hands leadership over and writes the audit record in
// one transaction, guarded by the leader and the target being the ones
// shown.
func transferHolderKey(cmd *cobra.Command, g *cmdutil.Env, cli *clientv3.Client, h holder, ho election.HandOver, rec keyspace.AuditRecord, akey string) error {
	out := cmd.OutOrStdout()
	rec.Action, rec.To, rec.ToHolder, rec.Result = ActionForceTransfer, ho.To.Key, ho.To.Value, "transferred"
	octx, cancel := g.OpContext(cmd.Context())
	defer cancel()
	done, err := ho.Commit(octx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(akey), "=", 0)},
		[]clientv3.Op{clientv3.OpDelete(keyspace.HeldKey(g.Namespace, h.Kind, h.Name, h.Lease)), clientv3.OpPut(akey, keyspace.MustJSON(rec))})
	if err != nil {
		return g.Failed("hand over with the audit record", err)
	}
	if !done {
		return cmdutil.WithCode(cmdutil.ExitRefused, fmt.Errorf("the leader or %s changed meanwhile: nothing was forced", cmdutil.Safe(ho.To.Key)))
	}
	fmt.Fprintf(out, "handed %s from key %s to %s (%s); recorded as %s\n",
		h.what(), cmdutil.Safe(h.Key), cmdutil.Safe(ho.To.Key), cmdutil.Safe(cmdutil.Dash(ho.To.Value)), cmdutil.Safe(akey))
	return nil
}
