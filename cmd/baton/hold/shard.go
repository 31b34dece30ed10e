package hold

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/cmd/baton/cmdutil"
	"github.com/batonhq/baton/cmd/baton/keyspace"
	"github.com/batonhq/baton/cmd/baton/supervise"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/shard"
)

type shardOptions struct {
	count  int
	member string
	ttl    time.Duration
	drain  time.Duration
}

// NewCmdShard is `baton shard GROUP --count N --member NAME -- CMD ARGS`.
func NewCmdShard(g *cmdutil.Env) *cobra.Command {
	var o shardOptions
	cmd := &cobra.Command{
		Use:   "shard GROUP --count N --member NAME -- CMD ARGS...",
		Short: "Join a shard group and run a command per shard this member owns",
		Long: `Join the shard group GROUP of N shards as member NAME (package shard) and
run CMD once per shard the balance gives this member, each with BATON_SHARD,
BATON_SHARD_COUNT, BATON_SHARD_GROUP and BATON_FENCING_TOKEN in its
environment. Under the same supervision as baton lock: when the shard moves
to another member, may be lost, or baton is interrupted, the command gets
SIGTERM, and SIGKILL before --drain ends; the shard is released only then.
A command that exits 0 while its shard is still owned is started again
(after at least 100 ms); one that fails ends baton with an error, after
every other shard's command was stopped. Bad names and counts are refused
before connecting (exit 64).`,
		Args: cmdutil.Args(1, -1),
		RunE: func(cmd *cobra.Command, a []string) error {
			argv, err := splitCommand(cmd, a, 1)
			if err != nil {
				return err
			}
			if len(argv) == 0 {
				return cmdutil.UsageErrorf("a command is required after --")
			}
			if o.count < 1 || o.count > shard.MaxCount {
				return cmdutil.UsageErrorf("--count is %d, must be 1 to %d", o.count, shard.MaxCount)
			}
			if err := keys.ValidateName("--member", o.member); err != nil {
				return cmdutil.WithCode(cmdutil.ExitUsage, err)
			}
			if o.drain <= 0 {
				return cmdutil.UsageErrorf("--drain must be positive")
			}
			return runShard(cmd, g, o, a[0], argv)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.count, "count", 0, "number of shards of the group (all members must agree)")
	f.StringVar(&o.member, "member", "", "this member's name, unique in the group")
	f.DurationVar(&o.ttl, "ttl", shard.DefaultTTL, "lease TTL: whole seconds, at least 2s")
	f.DurationVar(&o.drain, "drain", shard.DefaultDrainTimeout, "how long a moving shard's command has, after SIGTERM, before SIGKILL and the release")
	return cmd
}

func runShard(cmd *cobra.Command, g *cmdutil.Env, o shardOptions, group string, argv []string) error {
	errOut := cmd.ErrOrStderr()
	// SIGKILL before the drain timeout releases the shard: the command
	// never outlives the ownership.
	grace := o.drain * 9 / 10
	proto, err := newChild(g, argv, grace, cmd)
	if err != nil {
		return err
	}
	// The commands share baton's output, one write at a time, and read no
	// input: several of them run at once.
	proto.Stdin = nil
	stdout := &lockedWriter{w: proto.Stdout}
	stderr := stdout
	if proto.Stderr != proto.Stdout {
		stderr = &lockedWriter{w: proto.Stderr}
	}
	proto.Stdout, proto.Stderr = stdout, stderr
	ictx, stop := cmdutil.Interruptible(cmd.Context())
	defer stop()
	cli, err := g.Client(cmd.Context())
	if err != nil {
		return err
	}
	defer cli.Close()
	grp, err := shard.New(cli, group, o.count, shard.WithNamespace(g.Namespace), shard.WithTTL(o.ttl), shard.WithDrainTimeout(o.drain))
	if err != nil {
		return cmdutil.WithCode(cmdutil.ExitUsage, err)
	}
	defer func() { _ = grp.Close() }()
	var mu sync.Mutex // one status line at a time
	status := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(errOut, "baton: shard group %s: "+format+"\n", append([]any{cmdutil.SafeQ(group)}, args...)...)
	}
	err = grp.Run(ictx, o.member, func(ctx context.Context, s *shard.Shard) error {
		tok, err := childToken(g, s.Token())
		if err != nil {
			return err
		}
		c := *proto
		c.Env = append([]string{"BATON_SHARD=" + strconv.Itoa(s.ID()), "BATON_SHARD_COUNT=" + strconv.Itoa(s.Count()),
			"BATON_SHARD_GROUP=" + group, "BATON_FENCING_TOKEN=" + tok.String()}, cmdutil.TraceEnv(s.Context())...)
		keyspace.RecordHeld(ctx, s.Txn, keyspace.HeldPut(g.Namespace, keys.Shard, keyspace.ShardHeldName(group, s.ID()), s.Lease(), s.Acquired()))
		status("shard %d owned (token %d); starting the command", s.ID(), tok)
		res, err := c.Run(ictx, s)
		switch {
		case err != nil:
			return err
		case res.Lost || res.Cause != "":
			status("shard %d ended (%v); %s", s.ID(), context.Cause(s.Context()), stoppedText(res, grace))
			return nil
		case res.Status != 0 && s.Context().Err() == nil && ictx.Err() == nil:
			return fmt.Errorf("the command of shard %d exited with status %d", s.ID(), res.Status)
		}
		status("shard %d: the command exited with status %d", s.ID(), res.Status)
		return nil
	})
	switch {
	case errors.Is(err, shard.ErrInvalid):
		return cmdutil.WithCode(cmdutil.ExitUsage, err)
	case errors.Is(err, context.Canceled), errors.Is(err, shard.ErrClosed):
		if ierr := supervise.InterruptedBeforeCommand(ictx, "shard group "+cmdutil.SafeQ(group)); ierr != nil {
			return ierr
		}
		return nil
	case err != nil:
		return g.Failed("shard group", err)
	}
	return nil
}

// lockedWriter serializes the writes of several commands.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
