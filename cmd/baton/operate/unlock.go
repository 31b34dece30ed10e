package operate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/internal/keys"
)

// forceOptions are the flags of unlock and resign.
type forceOptions struct {
	force       bool
	reason      string
	evenIfAlive bool
	revokeLease bool
	watch       time.Duration // 0: a third of the granted TTL plus a second
	key         string        // unlock --holder-key: one holder's key (unlock_kinds.go)
	request     bool          // unlock --request: ask the holder (lock_request.go)
	to          string        // resign --to: the candidate to hand over to (resign_to.go)
	deadline    time.Duration // resign --to without --force: the leader's time to hand over
}

// Results of a force-unlock, as recorded.
const (
	ResultDeleted  = "deleted"
	resultRevoking = "revoking"
	resultRevoked  = "revoked"
	resultGone     = "lease already gone"
)

// Actions of the audit trail.
const (
	ActionForceUnlock = "force-unlock"
	actionForceResign = "force-resign"
)

// maxProbeOps bounds the permission probe's transaction below etcd's
// default --max-txn-ops (128).
const maxProbeOps = 100

func NewCmdUnlock(g *cmdutil.Env) *cobra.Command {
	var o forceOptions
	cmd := &cobra.Command{
		Use:   "unlock NAME [--holder-key KEY] --force --reason TEXT [--even-if-alive] [--revoke-lease]",
		Short: "Force-release a lock held by another process, after checking it is dead",
		Long: `Release the lock NAME for a holder that died without releasing it. baton
shows the holder, checks that you may force it (the operators access level
of the namespace), then watches the holder's lease for more than a third of
its TTL: if a renewal arrives the holder is alive, and baton refuses (exit
77) unless --even-if-alive is given.

Then, in one transaction guarded by the holder's key still being the one
shown, baton deletes that one key (and its acquisition record) and writes
the audit record. Other locks held on the same lease stay held. The
holder's context ends: a live holder stops, and a paused one is fenced by
its token.

--revoke-lease instead revokes the holder's whole lease, which releases
every key on it: baton lists those keys first and records them all.

A semaphore's permit or a read/write lock's holder is named by its key,
as baton locks shows it: --holder-key KEY deletes exactly that one key (one
permit, or one reader), with the same checks and audit record.

--request --reason TEXT instead asks the holder to let go, and forces
nothing: a program using package mutex sees it on its Lock's
ReleaseRequested, and baton lock passes it to its command as a signal
(--release-signal, SIGTERM by default) and releases once the command has
exited. The request is for that holder only (a later holder never sees
it), and is written with an audit record, which takes the requesters (or
operators) access level of the namespace (exit 78 without it; nothing is
written). A requester cannot --force.

Elections have their own command: baton resign NAME --force.`,
		Example: `  baton unlock nightly-report --force --reason "host db-7 died, INC-4411"
  baton unlock nightly-report --force --reason "stuck, INC-4412" --even-if-alive
  baton unlock bulk-0007 --force --reason "whole session wedged" --revoke-lease
  baton unlock nightly-report --request --reason "deploy in 5 minutes, INC-4414"
  baton unlock exports --holder-key /baton/v1/semaphore/exports/694d7f1c2a3b0011.p1 --force --reason "worker w-1 hung"`,
		Args: cmdutil.Args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if o.request {
				if err := validateRequest(cmd, o); err != nil {
					return err
				}
				return runRequest(cmd, g, keys.Lock, a[0], o.reason)
			}
			if err := validateForce(cmd, o); err != nil {
				return err
			}
			if err := validateForceKey(g.Namespace, a[0], o.key); err != nil {
				return err
			}
			return runForce(cmd, g, o, keys.Lock, a[0])
		},
	}
	forceFlags(cmd, &o, "lock")
	addForceKeyFlag(cmd, &o)
	cmd.Flags().BoolVar(&o.request, "request", false, "instead of forcing: ask the holder to let go (baton lock passes it to its command as --release-signal); audited")
	return cmd
}

func NewCmdResign(g *cmdutil.Env) *cobra.Command {
	var o forceOptions
	cmd := &cobra.Command{
		Use:   "resign NAME [--to CANDIDATE] --force --reason TEXT [--even-if-alive] [--revoke-lease]",
		Short: "Hand leadership to a candidate, or force the leader of an election to step down",
		Long: `Remove the leader of election NAME, for a leader that died without
resigning; the next candidate leads. The checks, the transaction and the
audit record are those of baton unlock: the leader's one key (and its
acquisition record) is deleted with the audit record, guarded by the key
still being the leader's, unless --revoke-lease revokes its whole lease.

--to CANDIDATE hands leadership to one candidate, named by its key or its
identity (as baton candidates shows them; an identity must name one
waiting candidate). Without --force, the leader is asked to do it (its
Term's EndRequested; Run and baton elect hand over at once): baton waits
until the candidate leads, and exits 77 if the leader did not hand over
within --deadline. With --force --reason, after the same checks as above,
baton hands over itself in one transaction with the audit record: under
the preferred strategy it deletes the leader's key and writes the
candidate's; under the oldest strategy it deletes the leader's key and
those of the candidates queued ahead of the target, which queue again
behind it. Under the oldest strategy a hand-over past another candidate
is refused (exit 77, nothing done) while a candidate that is not baton's
(etcd's concurrency.Election, etcdctl elect) waits: it would lead beside
the target.

--request --reason TEXT instead asks the leader to step down, as baton
unlock --request asks a holder: a Term sees it on ReleaseRequested, baton
elect passes it to its command as --release-signal.`,
		Example: `  baton resign scheduler --force --reason "leader on host-3 hung, INC-4413"
  baton resign scheduler --to /baton/v1/election/scheduler/694d7f1c2a3b0007
  baton resign scheduler --to host-7
  baton resign scheduler --to /baton/v1/election/scheduler/694d7f1c2a3b0007 --force --reason "drain host-3" --even-if-alive`,
		Args: cmdutil.Args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if o.request {
				if err := validateRequest(cmd, o); err != nil {
					return err
				}
				return runRequest(cmd, g, keys.Election, a[0], o.reason)
			}
			if err := validateResignTo(g.Namespace, a[0], o); err != nil {
				return err
			}
			if o.to != "" && !o.force {
				return runResignRequest(cmd, g, o, a[0])
			}
			if err := validateForce(cmd, o); err != nil {
				return err
			}
			return runForce(cmd, g, o, keys.Election, a[0])
		},
	}
	forceFlags(cmd, &o, "leader")
	addResignToFlags(cmd, &o)
	cmd.Flags().BoolVar(&o.request, "request", false, "instead of forcing: ask the leader to step down (baton elect passes it to its command as --release-signal); audited")
	return cmd
}

func forceFlags(cmd *cobra.Command, o *forceOptions, what string) {
	f := cmd.Flags()
	f.BoolVar(&o.force, "force", false, "required: act on a "+what+" this process does not hold")
	f.StringVar(&o.reason, "reason", "", "why, for the audit record (required; one line of printable text)")
	f.BoolVar(&o.evenIfAlive, "even-if-alive", false, "go on even if the holder's lease is being renewed")
	f.BoolVar(&o.revokeLease, "revoke-lease", false, "revoke the holder's whole lease: releases every key on it")
	f.DurationVar(&o.watch, "watch", 0, "how long to watch the lease for renewals; default a third of its TTL plus 1s")
	_ = f.MarkHidden("watch")
}

// validateForce checks the flags of unlock and resign, before connecting.
func validateForce(cmd *cobra.Command, o forceOptions) error {
	if !o.force {
		return cmdutil.UsageErrorf("%s takes another process's %s away: pass --force and --reason to do it", cmd.Name(), kindWord(cmd))
	}
	if strings.TrimSpace(o.reason) == "" {
		return cmdutil.UsageErrorf("--reason: say why, for the audit record")
	}
	if err := cmdutil.ValidateReason(o.reason); err != nil {
		return err
	}
	if o.watch < 0 {
		return cmdutil.UsageErrorf("--watch %v: must not be negative", o.watch)
	}
	return nil
}

func kindWord(cmd *cobra.Command) string {
	if cmd.Name() == "resign" {
		return "leadership"
	}
	return "lock"
}

// holder is the contender holding a lock or leading an election.
type holder struct {
	Kind     keys.Kind
	Name     string
	Key      string
	Token    int64
	Lease    clientv3.LeaseID
	Identity string // the key's value: host:pid, or the election value
}

func (h holder) what() string {
	switch h.Kind {
	case keys.Election:
		return "election " + cmdutil.SafeQ(h.Name)
	case keys.Semaphore, keys.RWLock:
		return taggedWhat(h)
	}
	return "lock " + cmdutil.SafeQ(h.Name)
}

// readHolder returns the holder of kind/name; the zero holder (empty Key)
// when none.
func readHolder(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, name string) (holder, error) {
	resp, err := cli.Get(ctx, keys.Prefix(ns, kind, name), clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		return holder{}, err
	}
	kv := resp.Kvs[0]
	return holder{Kind: kind, Name: name, Key: string(kv.Key), Token: kv.CreateRevision,
		Lease: clientv3.LeaseID(kv.Lease), Identity: string(kv.Value)}, nil
}

func runForce(cmd *cobra.Command, g *cmdutil.Env, o forceOptions, kind keys.Kind, name string) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	cli, err := g.Client(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()

	octx, cancel := g.OpContext(ctx)
	h, err := readForceTarget(octx, cli, g.Namespace, kind, name, o.key)
	cancel()
	if err != nil {
		return g.Failed("read the holder", err)
	}
	if h.Key == "" && o.key != "" {
		return fmt.Errorf("key %s does not hold %s (it waits, or is gone): nothing to unlock", cmdutil.Safe(o.key), cmdutil.SafeQ(name))
	}
	if h.Key == "" {
		if err := heldAsTagged(ctx, g, cli, kind, name); err != nil {
			return err
		}
		return notHeld(ctx, g, cli, kind, name)
	}
	fmt.Fprintf(out, "%s held by %s: token %d, key %s, lease %s\n",
		h.what(), cmdutil.Safe(cmdutil.Dash(h.Identity)), h.Token, cmdutil.Safe(h.Key), cmdutil.LeaseHex(int64(h.Lease)))
	var ho election.HandOver
	if o.to != "" {
		if ho, err = prepareForceTransfer(ctx, g, cli, name, h, o.to); err != nil {
			return err
		}
		fmt.Fprintf(out, "hand-over target %s (%s)\n", cmdutil.Safe(ho.To.Key), cmdutil.Safe(cmdutil.Dash(ho.To.Value)))
	}

	// The keys the lease holds, listed before anything is done: a revoke
	// releases all of them.
	var leaseKeys []string
	if o.revokeLease {
		octx, cancel := g.OpContext(ctx)
		leaseKeys, err = attachedKeys(octx, cli, h.Lease)
		cancel()
		if err != nil {
			return g.Failed("list the keys of the holder's lease", err)
		}
		fmt.Fprintf(out, "lease %s holds %d key(s), all released by --revoke-lease:\n", cmdutil.LeaseHex(int64(h.Lease)), len(leaseKeys))
		for _, k := range leaseKeys {
			fmt.Fprintf(out, "  %s\n", cmdutil.Safe(k))
		}
	}

	// Permission first: an observer is told at once, not after watching.
	octx, cancel = g.OpContext(ctx)
	err = probeForcePermission(octx, cli, g.Namespace, h, leaseKeys)
	cancel()
	if err != nil {
		return g.Failed(fmt.Sprintf("check the permission to force %s", h.what()), err)
	}

	wctx, cancel := context.WithTimeout(ctx, o.watch+g.CommandTimeout+2*time.Minute)
	r, err := watchRenewal(wctx, cli, h.Lease, o.watch)
	cancel()
	if err != nil {
		return g.Failed("watch the holder's lease", err)
	}
	if r.First < 0 || r.Last < 0 {
		fmt.Fprintf(out, "the holder's lease %s expired meanwhile: %s is free, nothing was forced\n", cmdutil.LeaseHex(int64(h.Lease)), h.what())
		return nil
	}
	state := "NOT renewed: the holder looks dead or stalled"
	if r.Renewed {
		state = "RENEWED: the holder is alive"
	}
	fmt.Fprintf(out, "watched lease %s (granted %v) for %v: ttl %v -> %v, %s\n",
		cmdutil.LeaseHex(int64(h.Lease)), r.Granted, r.Watched, r.First, r.Last, state)
	if r.Renewed && !o.evenIfAlive {
		fmt.Fprintf(out, "refusing to force: stop the holder first, or pass --even-if-alive\n")
		return &cmdutil.CodedError{Code: cmdutil.ExitRefused, Err: errors.New("refused: the holder is alive"), Silent: true}
	}

	id, err := g.Identity(ctx, cli)
	if err != nil {
		return g.Failed("read the auth status", err)
	}
	osUser, host := cmdutil.WhoAmI()
	action := ActionForceUnlock
	if kind == keys.Election {
		action = actionForceResign
	}
	rec := keyspace.AuditRecord{
		Time: g.IO.Now().UTC(), Action: action, Kind: string(h.Kind), Name: name, Key: h.Key, Holder: h.Identity,
		Token: h.Token, Lease: cmdutil.LeaseHex(int64(h.Lease)), TTLLeft: cmdutil.TTLSeconds(r.Last), Renewed: r.Renewed,
		EvenIfAlive: o.evenIfAlive, Reason: o.reason, Identity: id.Name, IdentitySource: id.Source,
		OSUser: osUser, Host: host, LeaseKeys: leaseKeys,
	}
	akey := keyspace.AuditKey(g.Namespace, rec.Time, h.Lease)
	if o.revokeLease {
		return revokeHolderLease(cmd, g, cli, h, rec, akey)
	}
	if o.to != "" {
		return transferHolderKey(cmd, g, cli, h, ho, rec, akey)
	}
	return deleteHolderKey(cmd, g, cli, h, rec, akey)
}

// notHeld explains a name with no holder, pointing to the other command
// when the name is held as the other kind.
func notHeld(ctx context.Context, g *cmdutil.Env, cli *clientv3.Client, kind keys.Kind, name string) error {
	other, cmdName := keys.Election, "resign"
	if kind == keys.Election {
		other, cmdName = keys.Lock, "unlock"
	}
	octx, cancel := g.OpContext(ctx)
	defer cancel()
	if h, err := readHolder(octx, cli, g.Namespace, other, name); err == nil && h.Key != "" {
		return cmdutil.UsageErrorf("%s is held (token %d), not a %s: use baton %s %s --force --reason TEXT",
			h.what(), h.Token, kind, cmdName, safeArg(name))
	}
	what := holder{Kind: kind, Name: name}.what()
	if kind == keys.Election {
		return fmt.Errorf("%s has no leader: nothing to force", what)
	}
	return fmt.Errorf("%s is not held: nothing to unlock", what)
}

// safeArg is a name as the user would type it again in a shell.
func safeArg(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:@%+=", r))
	}) {
		return s
	}
	if cmdutil.NeedsQuote(s) {
		return cmdutil.SafeQ(s)
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// attachedKeys lists the keys attached to lease, sorted by etcd.
func attachedKeys(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID) ([]string, error) {
	resp, err := cli.TimeToLive(ctx, lease, clientv3.WithAttachedKeys())
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(resp.Keys))
	for _, k := range resp.Keys {
		out = append(out, string(k))
	}
	return out, nil
}

// probeForcePermission asks etcd whether this client may do what the
// force will do, without doing it: etcd checks the permissions of both
// branches of a transaction before it evaluates the condition, and this
// condition (a version below zero) never holds.
func probeForcePermission(ctx context.Context, cli *clientv3.Client, ns string, h holder, leaseKeys []string) error {
	ops := []clientv3.Op{
		clientv3.OpDelete(h.Key),
		clientv3.OpDelete(keyspace.HeldKey(ns, h.Kind, h.Name, h.Lease)),
		clientv3.OpPut(keyspace.AuditPrefix(ns)+"permission-probe", ""),
	}
	for _, k := range leaseKeys {
		if len(ops) >= maxProbeOps {
			break
		}
		if k != h.Key {
			ops = append(ops, clientv3.OpDelete(k))
		}
	}
	_, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(h.Key), "<", 0)).Then(ops...).Commit()
	return err
}

// stillShown guards a forced release's transaction: the holder's key is
// still the one shown (its token), and akey holds no audit record yet.
func stillShown(h holder, akey string) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(h.Key), "=", h.Token),
		clientv3.Compare(clientv3.CreateRevision(akey), "=", 0)}
}

// leftMeanwhile says that a forced release's transaction found the holder
// gone (stillShown failed).
func leftMeanwhile(out io.Writer, h holder) {
	fmt.Fprintf(out, "the holder left meanwhile (key %s is no longer token %d): nothing was forced\n", cmdutil.Safe(h.Key), h.Token)
}

// deleteHolderKey deletes the holder's one key and acquisition record and
// writes the audit record, in one transaction guarded by the key's
// CreateRevision: either all three happen, or (the holder left meanwhile)
// none.
func deleteHolderKey(cmd *cobra.Command, g *cmdutil.Env, cli *clientv3.Client, h holder, rec keyspace.AuditRecord, akey string) error {
	out := cmd.OutOrStdout()
	rec.Result = ResultDeleted
	octx, cancel := g.OpContext(cmd.Context())
	defer cancel()
	resp, err := cli.Txn(octx).If(stillShown(h, akey)...).
		Then(clientv3.OpDelete(h.Key), clientv3.OpDelete(keyspace.HeldKey(g.Namespace, h.Kind, h.Name, h.Lease)),
			clientv3.OpPut(akey, keyspace.MustJSON(rec))).
		Commit()
	if err != nil {
		return g.Failed("delete the holder's key with its audit record", err)
	}
	if !resp.Succeeded {
		leftMeanwhile(out, h)
		return nil
	}
	fmt.Fprintf(out, "deleted key %s: %s is free; lease %s and any other key on it are untouched; recorded as %s\n",
		cmdutil.Safe(h.Key), h.what(), cmdutil.LeaseHex(int64(h.Lease)), cmdutil.Safe(akey))
	return nil
}

// revokeHolderLease records the revocation (guarded by the holder's key),
// revokes the lease, and records the outcome.
func revokeHolderLease(cmd *cobra.Command, g *cmdutil.Env, cli *clientv3.Client, h holder, rec keyspace.AuditRecord, akey string) error {
	out := cmd.OutOrStdout()
	rec.Result = resultRevoking
	octx, cancel := g.OpContext(cmd.Context())
	defer cancel()
	// The record is written only if the holder is still the one shown, so
	// it never names a holder that was not revoked.
	resp, err := cli.Txn(octx).If(stillShown(h, akey)...).
		Then(clientv3.OpPut(akey, keyspace.MustJSON(rec))).Commit()
	if err != nil {
		return g.Failed("write the audit record", err)
	}
	if !resp.Succeeded {
		leftMeanwhile(out, h)
		return nil
	}
	_, rerr := cli.Revoke(octx, h.Lease)
	switch {
	case rerr == nil:
		rec.Result = resultRevoked
	case errors.Is(rerr, rpctypes.ErrLeaseNotFound):
		rec.Result = resultGone
	default:
		rec.Result = "revoke failed: " + rerr.Error()
	}
	if _, err := cli.Put(octx, akey, keyspace.MustJSON(rec)); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "baton: the audit record %s still says %q: %s\n", cmdutil.Safe(akey), resultRevoking, cmdutil.SafeMessage(err.Error()))
	}
	if rerr != nil && rec.Result != resultGone {
		return g.Failed("revoke the holder's lease", rerr)
	}
	fmt.Fprintf(out, "revoked lease %s: %s and %d key(s) on the lease are free; recorded as %s\n",
		cmdutil.LeaseHex(int64(h.Lease)), h.what(), len(rec.LeaseKeys), cmdutil.Safe(akey))
	return nil
}

// renewal is what watching a lease's TTL showed.
type renewal struct {
	Granted time.Duration
	First   time.Duration // TTL left at the first look
	Last    time.Duration // TTL left at the last look; -1 if the lease is gone
	Renewed bool
	Watched time.Duration
}

// watchRenewal samples the lease's TTL for window and reports whether it
// went up (a renewal arrived). etcd reports whole seconds; a holder
// renewing every third of its TTL shows a rise within any window longer
// than a third of the TTL.
func watchRenewal(ctx context.Context, cli *clientv3.Client, lease clientv3.LeaseID, window time.Duration) (renewal, error) {
	var r renewal
	ttl := func() (time.Duration, time.Duration, error) {
		resp, err := cli.TimeToLive(ctx, lease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return -1, 0, nil
		}
		if err != nil {
			return 0, 0, err
		}
		if resp.TTL < 0 {
			return -1, 0, nil
		}
		return time.Duration(resp.TTL) * time.Second, time.Duration(resp.GrantedTTL) * time.Second, nil
	}
	first, granted, err := ttl()
	if err != nil {
		return r, err
	}
	r.First, r.Last, r.Granted = first, first, granted
	if first < 0 {
		return r, nil
	}
	if window <= 0 {
		window = granted/3 + time.Second
	}
	start := time.Now()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for time.Since(start) < window {
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-tick.C:
		}
		cur, _, err := ttl()
		if err != nil {
			return r, err
		}
		if cur > r.Last && r.Last >= 0 {
			r.Renewed = true
		}
		r.Last = cur
		if cur < 0 {
			break
		}
	}
	r.Watched = time.Since(start).Round(100 * time.Millisecond)
	return r, nil
}
