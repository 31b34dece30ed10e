package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

type unlockOptions struct {
	force       bool
	reason      string
	evenIfAlive bool
	watch       time.Duration // 0: a third of the granted TTL plus a second
}

// auditRecord is one force-unlock, stored under /<ns>/v1/audit/.
type auditRecord struct {
	Time        time.Time `json:"time"`
	Action      string    `json:"action"`
	Lock        string    `json:"lock"`
	Key         string    `json:"key"`
	Holder      string    `json:"holder"`
	Token       int64     `json:"token"`
	Lease       string    `json:"lease"`
	TTLLeft     int64     `json:"ttl_left_seconds"`
	Renewed     bool      `json:"renewed"`
	EvenIfAlive bool      `json:"even_if_alive"`
	Reason      string    `json:"reason"`
	EtcdUser    string    `json:"etcd_user,omitempty"`
	OSUser      string    `json:"os_user"`
	Host        string    `json:"host"`
	Result      string    `json:"result"`
}

// Results of a force-unlock.
const (
	resultRevoking = "revoking"
	resultRevoked  = "revoked"
	resultGone     = "lease already gone"
)

const actionForceUnlock = "force-unlock"

// auditKey orders records by time; the lease makes it unique.
func auditKey(ns string, t time.Time, lease clientv3.LeaseID) string {
	return keys.KindPrefix(ns, keys.Audit) + t.UTC().Format("20060102T150405.000000000Z") + "-" + leaseHex(int64(lease))
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

func whoAmI() (osUser, host string) {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	if u, err := user.Current(); err == nil {
		return u.Username, host
	}
	return dash(os.Getenv("USER")), host
}

func newUnlockCmd(g *globals) *cobra.Command {
	var o unlockOptions
	cmd := &cobra.Command{
		Use:   "unlock NAME --force --reason TEXT [--even-if-alive]",
		Short: "Force-release a lock held by another process, after checking it is dead",
		Long: `Release the lock NAME by revoking its holder's lease, for a holder that
died without releasing it. baton first shows the holder, then watches its
lease's TTL for more than a third of the lease: if a renewal arrives the
holder is alive, and baton refuses (exit 77) unless --even-if-alive is given.
Revoking the lease releases every key on it, and ends the holder's
context: a live holder stops, and a paused one is fenced by its token.

Every force-unlock is recorded under the namespace (who, from which host,
when, why, which holder and token): see baton audit.`,
		Args: args(1, 1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if !o.force {
				return usageErrorf("unlock takes another process's lock away: pass --force and --reason to do it")
			}
			if strings.TrimSpace(o.reason) == "" {
				return usageErrorf("--reason: say why the lock is forced, for the audit record")
			}
			return runUnlock(cmd, g, o, a[0])
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.force, "force", false, "required: release a lock this process does not hold")
	f.StringVar(&o.reason, "reason", "", "why, for the audit record (required)")
	f.BoolVar(&o.evenIfAlive, "even-if-alive", false, "revoke even if the holder's lease is being renewed")
	f.DurationVar(&o.watch, "watch", 0, "how long to watch the lease for renewals; default a third of its TTL plus 1s")
	_ = f.MarkHidden("watch")
	return cmd
}

func runUnlock(cmd *cobra.Command, g *globals, o unlockOptions, name string) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	cli, err := g.client(ctx)
	if err != nil {
		return err
	}
	defer cli.Close()
	m, err := mutex.New(cli, name, mutex.WithNamespace(g.namespace))
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer m.Close()
	octx, cancel := g.opContext(ctx)
	h, err := m.Holder(octx)
	cancel()
	if err != nil {
		return g.failed("read holder", err)
	}
	if h.Key == "" {
		return fmt.Errorf("lock %q is not held: nothing to unlock", name)
	}
	fmt.Fprintf(out, "lock %q held by %s: token %d, key %s, lease %s, ttl left %s\n",
		name, dash(h.Identity), h.Token, h.Key, leaseHex(int64(h.Lease)), ttlText(h.TTL))

	wctx, cancel := context.WithTimeout(ctx, o.watch+g.commandTimeout+2*time.Minute)
	r, err := watchRenewal(wctx, cli, h.Lease, o.watch)
	cancel()
	if err != nil {
		return g.failed("watch the holder's lease", err)
	}
	if r.First < 0 || r.Last < 0 {
		fmt.Fprintf(out, "the holder's lease %s expired meanwhile: the lock is free, nothing was forced\n", leaseHex(int64(h.Lease)))
		return nil
	}
	state := "NOT renewed: the holder looks dead or stalled"
	if r.Renewed {
		state = "RENEWED: the holder is alive"
	}
	fmt.Fprintf(out, "watched lease %s (granted %v) for %v: ttl %v -> %v, %s\n",
		leaseHex(int64(h.Lease)), r.Granted, r.Watched, r.First, r.Last, state)
	if r.Renewed && !o.evenIfAlive {
		fmt.Fprintf(out, "refusing to unlock: stop the holder first, or pass --even-if-alive\n")
		return &exitError{code: ExitRefused, err: errors.New("refused: the holder is alive"), silent: true}
	}

	osUser, host := whoAmI()
	etcdUser, _, _ := strings.Cut(g.user, ":")
	rec := auditRecord{
		Time: g.io.Now().UTC(), Action: actionForceUnlock, Lock: name, Key: h.Key, Holder: h.Identity,
		Token: int64(h.Token), Lease: leaseHex(int64(h.Lease)), TTLLeft: ttlSeconds(r.Last), Renewed: r.Renewed,
		EvenIfAlive: o.evenIfAlive, Reason: o.reason, EtcdUser: etcdUser, OSUser: osUser, Host: host,
		Result: resultRevoking,
	}
	akey := auditKey(g.namespace, rec.Time, h.Lease)
	octx, cancel = g.opContext(ctx)
	defer cancel()
	// The record is written only if the holder is still the one shown, so
	// it never names a holder that was not revoked.
	resp, err := cli.Txn(octx).
		If(clientv3.Compare(clientv3.CreateRevision(h.Key), "=", int64(h.Token))).
		Then(clientv3.OpPut(akey, mustJSON(rec))).Commit()
	if err != nil {
		return g.failed("write the audit record", err)
	}
	if !resp.Succeeded {
		fmt.Fprintf(out, "the holder released the lock meanwhile: nothing was forced\n")
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
	if _, err := cli.Put(octx, akey, mustJSON(rec)); err != nil && rerr == nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "baton: the lease was revoked but the audit result was not updated: %v\n", err)
	}
	if rerr != nil && rec.Result != resultGone {
		return g.failed("revoke the holder's lease", rerr)
	}
	fmt.Fprintf(out, "revoked lease %s: lock %q is free; recorded as %s\n", leaseHex(int64(h.Lease)), name, akey)
	return nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs: cannot fail
	}
	return string(b)
}
