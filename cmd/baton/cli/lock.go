package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/mutex"
)

// releaseTimeout bounds the release or resignation on the way out.
const releaseTimeout = 5 * time.Second

type lockOptions struct {
	ttl     time.Duration
	timeout time.Duration
	try     bool
	grace   time.Duration
}

// heldView is what lock prints once it holds the lock, and elect once it
// leads.
type heldView struct {
	Kind  string        `json:"kind"`
	Name  string        `json:"name"`
	Value string        `json:"value,omitempty"`
	Key   string        `json:"key"`
	Token int64         `json:"token"`
	Lease string        `json:"lease"`
	TTL   time.Duration `json:"-"`
	TTLs  int64         `json:"ttl_seconds"`
}

func writeHeld(w io.Writer, asJSON bool, v heldView) error {
	v.TTLs = int64(v.TTL / time.Second)
	if asJSON {
		return writeJSONLine(w, v)
	}
	what := "holding lock"
	if v.Kind == string(keys.Election) {
		what = "leading election"
	}
	value := ""
	if v.Value != "" {
		value = fmt.Sprintf(" as %q", v.Value)
	}
	_, err := fmt.Fprintf(w, "%s %q%s: token %d, key %s, lease %s (ttl %v)\n", what, v.Name, value, v.Token, v.Key, v.Lease, v.TTL)
	return err
}

// splitCommand separates NAME (and VALUE) from the command after "--".
func splitCommand(cmd *cobra.Command, a []string, fixed int) ([]string, error) {
	if len(a) <= fixed {
		return nil, nil
	}
	if cmd.ArgsLenAtDash() != fixed {
		return nil, usageErrorf("put -- before the command, as in: %s %s -- %s", cmd.CommandPath(), strings.Join(a[:fixed], " "), strings.Join(a[fixed:], " "))
	}
	return a[fixed:], nil
}

func newLockCmd(g *globals) *cobra.Command {
	var o lockOptions
	cmd := &cobra.Command{
		Use:   "lock NAME [-- CMD ARGS...]",
		Short: "Hold a lock until interrupted, or run a command under it",
		Long: `Acquire the lock NAME. Without a command, hold it until SIGINT or SIGTERM,
then release it. With a command, run it with BATON_LOCK_NAME, BATON_LOCK_KEY
and BATON_FENCING_TOKEN in its environment, forward SIGINT and SIGTERM to it,
and release the lock when it exits; baton then exits with its status.

If the lock may be lost while the command runs (its lease expired or was
revoked, renewals failed, its key was deleted), the command gets SIGTERM,
then SIGKILL after --grace, and baton exits with 79 (ownership lost).
--try exits with 75 at once if another holds the lock; so does --timeout
when it runs out.`,
		Args: args(1, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			argv, err := splitCommand(cmd, a, 1)
			if err != nil {
				return err
			}
			if o.try && o.timeout > 0 {
				return usageErrorf("--try and --timeout exclude each other")
			}
			if o.timeout < 0 || o.grace <= 0 {
				return usageErrorf("--timeout must not be negative and --grace must be positive")
			}
			return runLock(cmd, g, o, a[0], argv)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&o.ttl, "ttl", mutex.DefaultTTL, "lease TTL: whole seconds, at least 2s")
	f.DurationVar(&o.timeout, "timeout", 0, "give up waiting for the lock after this long (exit 75); 0 waits until interrupted")
	f.BoolVar(&o.try, "try", false, "do not wait: exit 75 if another holds the lock")
	f.DurationVar(&o.grace, "grace", 10*time.Second, "after SIGTERM, how long the command has before SIGKILL")
	return cmd
}

func runLock(cmd *cobra.Command, g *globals, o lockOptions, name string, argv []string) error {
	ictx, stopNotify := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
	defer stopNotify()
	cli, err := g.client(ictx)
	if err != nil {
		return err
	}
	defer cli.Close()
	m, err := mutex.New(cli, name, mutex.WithTTL(o.ttl), mutex.WithNamespace(g.namespace))
	if err != nil {
		return withCode(ExitUsage, err)
	}
	defer m.Close()

	l, err := acquireLock(ictx, g, m, o)
	if err != nil {
		return err
	}
	recordHeld(ictx, l.Txn, heldPut(g.namespace, keys.Lock, name, l.Lease(), l.Acquired()))
	v := heldView{Kind: string(keys.Lock), Name: name, Key: l.Key(), Token: int64(l.Token()),
		Lease: leaseHex(int64(l.Lease())), TTL: l.TTL()}
	release := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), releaseTimeout)
		defer cancel()
		return l.Unlock(rctx)
	}

	if len(argv) == 0 {
		if err := writeHeld(cmd.OutOrStdout(), g.json(), v); err != nil {
			_ = release()
			return err
		}
		select {
		case <-l.Done():
		case <-ictx.Done():
		}
		if err := lostError(l.Context(), "lock", name); err != nil {
			_ = release()
			return err
		}
		if err := release(); err != nil {
			return lostOr(err, "lock", name, "release")
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "baton: released lock %q\n", name)
		return nil
	}

	fmt.Fprintf(cmd.ErrOrStderr(), "baton: holding lock %q (token %d, key %s); running %s\n", name, v.Token, v.Key, argv[0])
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	stopNotify() // signals now go to the child

	c := child{
		argv: argv, grace: o.grace,
		env: []string{
			"BATON_LOCK_NAME=" + name,
			"BATON_LOCK_KEY=" + l.Key(),
			"BATON_FENCING_TOKEN=" + l.Token().String(),
		},
		stdin: cmd.InOrStdin(), stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr(),
	}
	res, err := c.run(cmd.Context(), l.Done(), sigs)
	uerr := release()
	if err != nil {
		return err
	}
	if res.lost {
		return withCode(ExitOwnershipLost, fmt.Errorf("lock %q lost while the command ran (%v); %s",
			name, context.Cause(l.Context()), stoppedText(res, o.grace)))
	}
	if uerr != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "baton: release lock %q: %v\n", name, uerr)
	}
	return childStatus(res.status)
}

// acquireLock takes the lock as the options say, mapping "not now" to
// ExitNotAcquired.
func acquireLock(ictx context.Context, g *globals, m *mutex.Mutex, o lockOptions) (*mutex.Lock, error) {
	var (
		actx   = ictx
		cancel = func() {}
	)
	switch {
	case o.try:
		actx, cancel = g.opContext(ictx)
	case o.timeout > 0:
		actx, cancel = context.WithTimeout(ictx, o.timeout)
	}
	defer cancel()
	var l *mutex.Lock
	var err error
	if o.try {
		l, err = m.TryLock(actx)
	} else {
		l, err = m.Lock(actx)
	}
	switch {
	case err == nil:
		return l, nil
	case errors.Is(err, mutex.ErrLocked):
		who := ""
		hctx, hcancel := g.opContext(ictx)
		if h, herr := m.Holder(hctx); herr == nil && h.Key != "" {
			who = fmt.Sprintf(" (holder %s, token %d)", dash(h.Identity), h.Token)
		}
		hcancel()
		return nil, withCode(ExitNotAcquired, fmt.Errorf("lock %q is held by another%s", m.Name(), who))
	case ictx.Err() != nil:
		return nil, withCode(ExitNotAcquired, fmt.Errorf("lock %q: interrupted before it was acquired", m.Name()))
	case o.timeout > 0 && errors.Is(actx.Err(), context.DeadlineExceeded):
		return nil, withCode(ExitNotAcquired, fmt.Errorf("lock %q not acquired within %v", m.Name(), o.timeout))
	}
	return nil, g.failed(fmt.Sprintf("acquire lock %q", m.Name()), err)
}

// lostError is an ExitOwnershipLost error if ctx ended by a loss, nil if
// it has not ended or ended by a release.
func lostError(ctx context.Context, kind, name string) error {
	if ctx.Err() == nil {
		return nil
	}
	cause := context.Cause(ctx)
	if !errors.Is(cause, mutex.ErrLost) {
		return nil
	}
	return withCode(ExitOwnershipLost, fmt.Errorf("%s %q lost: %v", kind, name, cause))
}

// lostOr maps an ErrNotHeld/ErrNotLeader from a release to ownership lost.
func lostOr(err error, kind, name, what string) error {
	if errors.Is(err, mutex.ErrLost) || errors.Is(err, mutex.ErrNotHeld) {
		return withCode(ExitOwnershipLost, fmt.Errorf("%s %q: %s: %w", kind, name, what, err))
	}
	return fmt.Errorf("%s %q: %s: %w", kind, name, what, err)
}

func stoppedText(res childResult, grace time.Duration) string {
	if res.killed {
		return fmt.Sprintf("the command got SIGTERM, outlived the %v grace and got SIGKILL (status %d)", grace, res.status)
	}
	return fmt.Sprintf("the command got SIGTERM and exited with status %d", res.status)
}
