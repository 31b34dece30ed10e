package shard

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/errs"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
	"github.com/batonhq/baton/internal/retry"
)

// MaxCount bounds the shard count given to New.
const MaxCount = 16384

// Group is a shard group: count shards spread over the members that Run
// joins to it, in this process and others. One Group runs one member at a
// time; it is safe for concurrent use.
type Group struct {
	cli      *clientv3.Client
	name     string
	count    int
	prefix   string
	ns       string
	label    string
	identity string
	drain    time.Duration
	cfg      config.Config
	sess     *core.Session
	own      bool
	met      *metrics.Metrics
	hooks    *hooks // test pause points; nil in production

	ctx    context.Context // ends when Close begins
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup // Run and Observe calls

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex // guards what follows
	running bool
	owners  map[int]*core.Owner[*Shard] // made at a shard's first acquisition
}

// New returns a Group of count shards for group in the configured
// namespace. It does not contact etcd: Run joins. count must be 1 to
// MaxCount; invalid names, counts and options are rejected with an error
// wrapping ErrInvalid.
func New(cli *clientv3.Client, group string, count int, opts ...Option) (*Group, error) {
	if err := keys.ValidateName("shard group name", group); err != nil {
		return nil, err
	}
	if count < 1 || count > MaxCount {
		return nil, fmt.Errorf("%w: shard count is %d, must be 1 to %d", ErrInvalid, count, MaxCount)
	}
	cfg, sess, own, met, identity, err := config.OpenGroup(cli, opts)
	if err != nil {
		return nil, err
	}
	// The metric label defaults to the group's, not one per shard.
	g := &Group{cli: cli, name: group, count: count, ns: cfg.Namespace, prefix: GroupPrefix(cfg.Namespace, group),
		label: cfg.Label(met, "shard:"+group), identity: identity, drain: DefaultDrainTimeout, cfg: cfg, sess: sess, own: own, met: met,
		owners: map[int]*core.Owner[*Shard]{}}
	if cfg.DrainSet {
		g.drain = cfg.DrainTimeout
	}
	g.ctx, g.cancel = context.WithCancelCause(context.Background())
	return g, nil
}

// Name returns the group's name.
func (g *Group) Name() string { return g.name }

// Namespace returns the group's namespace.
func (g *Group) Namespace() string { return g.ns }

// Count returns the number of shards.
func (g *Group) Count() int { return g.count }

// Prefix returns the etcd prefix of every key of the group.
func (g *Group) Prefix() string { return g.prefix }

// owner returns the Owner of shard id, made on first use: a mutex's, on
// the group's session, whose prefix is the shard's queue.
func (g *Group) owner(id int) *core.Owner[*Shard] {
	g.mu.Lock()
	defer g.mu.Unlock()
	o := g.owners[id]
	if o == nil {
		// No metrics of its own (each Owner would count the session's renewal
		// failures once more): the group records its shards' metrics.
		rec := metrics.Recorder{Logger: g.cfg.Session.Logger, Kind: metrics.Mutex, Name: g.name + "/" + strconv.Itoa(id), Namespace: g.ns, Label: g.label}
		o = core.NewOwner[*Shard](g.sess, core.OwnerConfig{Recorder: rec, Prefix: shardPrefix(g.prefix, id), NotHeld: ErrNotHeld, Busy: errBusy})
		g.owners[id] = o
	}
	return o
}

var errBusy = errors.New("shard: held by another member") // never returned: Run's acquisitions wait

// read returns the group's keys at one revision.
func (g *Group) read(ctx context.Context) (*view, error) { return g.readAt(ctx, 0) }

// readAt returns the group's keys at revision rev (0: the latest), or the
// latest if rev was compacted.
func (g *Group) readAt(ctx context.Context, rev int64) (*view, error) {
	var resp *clientv3.GetResponse
	err := retry.Reads(ctx, func(ctx context.Context) (err error) {
		resp, err = g.cli.Get(ctx, g.prefix, clientv3.WithPrefix(), clientv3.WithRev(rev))
		if errors.Is(err, rpctypes.ErrCompacted) {
			rev = 0
			resp, err = g.cli.Get(ctx, g.prefix, clientv3.WithPrefix())
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	v := newView(g.prefix, g.count)
	at := resp.Header.Revision // the latest, even for a read at rev
	if rev > 0 {
		at = rev
	}
	v.reset(resp.Kvs, at)
	return v, nil
}

// Owners returns one entry per shard, index = ID, read linearizably: the
// owner is the member whose key is oldest in the shard's queue (it may be
// a member that is leaving and still drains); an unowned shard has an
// empty Member.
func (g *Group) Owners(ctx context.Context) ([]Owner, error) {
	v, err := g.read(ctx)
	if err != nil {
		return nil, err
	}
	return v.owners(), nil
}

// Members returns the names of the live members, sorted.
func (g *Group) Members(ctx context.Context) ([]string, error) {
	v, err := g.read(ctx)
	if err != nil {
		return nil, err
	}
	return v.memberNames(), nil
}

// Close ends a Run in progress as if its ctx had ended (every shard's
// Context ends with ErrReleased, each is released once fn returns or the
// drain timeout passes, the member leaves), ends Observe calls, makes later
// Run calls return ErrClosed, and revokes the lease the Group created (a
// shared session is left open). It waits for every goroutine the Group
// started and is idempotent.
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		g.mu.Lock()
		g.cancel(errs.ErrClosed)
		g.mu.Unlock()
		g.wg.Wait()
		g.mu.Lock()
		owners := g.owners
		g.owners = nil
		g.mu.Unlock()
		var out []error
		for _, o := range owners {
			out = append(out, o.Close())
		}
		if g.own {
			out = append(out, config.CloseOwn(g.sess))
		}
		g.closeErr = errors.Join(out...)
	})
	return g.closeErr
}

// enter counts a Run or Observe; false after Close began.
func (g *Group) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ctx.Err() != nil {
		return false
	}
	g.wg.Add(1)
	return true
}
