// Package delay is the lock-delay shared by every primitive: after a holder
// is lost without releasing (lease expired or revoked, key deleted), no
// contender with a lock-delay acquires until the lost holder's delay has
// run out on etcd's clock.
//
// A holder with a delay records itself, in the transaction guarded by its
// key, under /<ns>/v1/delay/<kind>/<escaped name>/held/<key's last
// segment>/<token> (no lease: the record must outlive the holder's). The
// token keeps holds of one key apart (two Mutexes of a name on one lease
// take the same key in turn). A clean release deletes the record with the
// key, in one transaction. So a record whose key is gone, or was created
// again at another revision, is a holder lost without releasing: the first
// contender to see one turns it, in one transaction guarded by the
// record's revision, into a marker .../until/<segment>/<token> on a lease
// of the lost holder's delay, granted after the loss was visible; every
// contender with a delay waits for every marker's deletion (the lease's
// expiry, which etcd's leader times) before its acquisition returns.
package delay

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/core"
	"github.com/batonhq/baton/internal/group"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/planted"
	"github.com/batonhq/baton/internal/retry"
)

// Config is the lock-delay of one primitive (nil: none).
type Config struct {
	cli    *clientv3.Client
	d      time.Duration
	queue  string // the contenders' prefix
	prefix string // Prefix(ns, kind, name)
}

// New returns the lock-delay of the primitive kind/name whose contenders
// live under queue; nil when d is zero.
func New(cli *clientv3.Client, ns string, kind keys.Kind, name, queue string, d time.Duration) *Config {
	if d == 0 {
		return nil
	}
	return &Config{cli: cli, d: d, queue: queue, prefix: Prefix(ns, kind, name)}
}

// Prefix is where the lock-delay state of kind/name lives.
func Prefix(ns string, kind keys.Kind, name string) string {
	return keys.KindPrefix(ns, keys.Delay) + string(kind) + "/" + keys.Escape(name) + "/"
}

// Record is a holder's record, and a marker's value.
type Record struct {
	Key   string `json:"key"`
	Token int64  `json:"token"`
	// DelayMS is the holder's delay: what others wait if it is lost.
	DelayMS int64 `json:"delay_ms"`
	// Seen is a marker's: the revision at which the loss was seen.
	Seen int64 `json:"seen_rev,omitempty"`
}

func segment(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// hold names one hold of key: its last segment and its token.
func hold(key string, token int64) string {
	return segment(key) + "/" + strconv.FormatInt(token, 10)
}

// RecordKey is the record of the hold of holderKey created at token.
func (c *Config) RecordKey(holderKey string, token int64) string {
	return c.prefix + "held/" + hold(holderKey, token)
}

// RecordOf is RecordKey for kind/name whatever the caller's own delay: an
// operator's hand-over deletes the leader's record without knowing it.
func RecordOf(ns string, kind keys.Kind, name, holderKey string, token int64) string {
	return Prefix(ns, kind, name) + "held/" + hold(holderKey, token)
}

// DeleteLegacyRecord deletes the record of holderKey (created at token)
// that a build before per-hold records wrote, at .../held/<segment>: one
// written after the key's creation is that hold's (the key was live since).
func DeleteLegacyRecord(ns string, kind keys.Kind, name, holderKey string, token int64) clientv3.Op {
	k := Prefix(ns, kind, name) + "held/" + segment(holderKey)
	return clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), ">", token)}, []clientv3.Op{clientv3.OpDelete(k)}, nil)
}

func (c *Config) markerKey(r Record) string { return c.prefix + "until/" + hold(r.Key, r.Token) }

// Acquire is o.Acquire followed, with a delay, by After; a hold After
// fails for is released.
func Acquire[T any](ctx context.Context, o *core.Owner[T], c *Config, req core.Request, wrap func(*core.Hold) T) (T, error) {
	var h *core.Hold
	req.Confirms = c != nil // After's record write
	t, err := o.Acquire(ctx, req, func(hh *core.Hold) T { h = hh; return wrap(hh) })
	if err != nil || c == nil {
		return t, err
	}
	if err := c.After(ctx, h); err != nil {
		_ = Release(context.WithoutCancel(ctx), c, h, nil) // with its record: no delay for this
		var zero T
		return zero, fmt.Errorf("%s: lock-delay: %w", o.Name(), err)
	}
	return t, nil
}

// Release releases h, with its record when c is not nil.
func Release(ctx context.Context, c *Config, h *core.Hold, notHeld error) error {
	if c == nil {
		return core.Release(ctx, h)
	}
	return group.Release(ctx, c.cli, []*core.Hold{h}, notHeld, c.RecordKey(h.Key(), int64(h.Token())))
}

// After records h, just acquired, and returns once no lost holder's delay
// runs: the acquisition may return then. It ends with ctx or h's loss.
func (c *Config) After(ctx context.Context, h *core.Hold) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer context.AfterFunc(h.Context(), func() { cancel(context.Cause(h.Context())) })()
	b, _ := json.Marshal(Record{Key: h.Key(), Token: int64(h.Token()), DelayMS: c.d.Milliseconds()})
	reads := []clientv3.Op{clientv3.OpGet(c.prefix, clientv3.WithPrefix()), clientv3.OpGet(c.queue, clientv3.WithPrefix(), clientv3.WithKeysOnly())}
	var resp *clientv3.TxnResponse
	err := retry.Do(ctx, func(actx context.Context) (err error) { // a put of the same value: safe to repeat
		resp, err = h.Txn(clientv3.WithRequireLeader(actx)).Then(append([]clientv3.Op{clientv3.OpPut(c.RecordKey(h.Key(), int64(h.Token())), string(b))}, reads...)...).Commit()
		return err
	})
	if err != nil {
		return failure(ctx, err)
	}
	rs := resp.Responses[1:]
	for {
		state, queue := rs[0].GetResponseRange().Kvs, rs[1].GetResponseRange().Kvs
		live := make(map[string]int64, len(queue)) // key: its CreateRevision
		for _, kv := range queue {
			live[string(kv.Key)] = kv.CreateRevision
		}
		var markers []string
		converted := false
		for _, kv := range state {
			k := string(kv.Key)
			var r Record
			if json.Unmarshal(kv.Value, &r) != nil {
				continue // not baton's
			}
			switch {
			case strings.HasPrefix(k, c.prefix+"until/"):
				markers = append(markers, k)
			case strings.HasPrefix(k, c.prefix+"held/") && live[r.Key] != r.Token: // gone, or another hold's now
				if err := c.convert(ctx, kv, r, resp.Header.Revision); err != nil {
					return failure(ctx, err)
				}
				converted = true
			}
		}
		if !converted && len(markers) == 0 {
			return nil
		}
		if !converted {
			if err := c.waitGone(ctx, markers, resp.Header.Revision); err != nil {
				return failure(ctx, err)
			}
		}
		err = retry.Reads(ctx, func(actx context.Context) (err error) {
			resp, err = c.cli.Txn(clientv3.WithRequireLeader(actx)).Then(reads...).Commit()
			return err
		})
		if err != nil {
			return failure(ctx, err)
		}
		rs = resp.Responses
	}
}

// convert turns a lost holder's record into a marker on a lease of the
// holder's delay, granted now that the loss is visible. Another contender
// may have converted it first: then the lease goes unused.
func (c *Config) convert(ctx context.Context, kv *mvccpb.KeyValue, r Record, seen int64) error {
	ttl := (time.Duration(r.DelayMS)*time.Millisecond + time.Second - 1) / time.Second
	if planted.On("j") {
		ttl /= 2
	}
	var lease clientv3.LeaseID
	err := retry.Do(ctx, func(actx context.Context) error {
		g, err := c.cli.Grant(clientv3.WithRequireLeader(actx), max(int64(ttl), 1))
		if err == nil {
			lease = g.ID
		}
		return err
	})
	if err != nil {
		return err
	}
	r.Seen = seen
	b, _ := json.Marshal(r)
	var ours bool
	err = retry.Do(ctx, func(actx context.Context) (err error) {
		ours, err = c.place(actx, kv, c.markerKey(r), b, lease)
		return err
	})
	if err == nil && !ours { // another contender converted it first
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retry.AttemptTimeout)
		_, _ = c.cli.Revoke(rctx, lease)
		cancel()
	}
	return err
}

// place moves the record kv to the marker with value b on lease;
// ours says the marker is on lease: placed now, or by an earlier
// attempt whose reply was lost (then the record is gone and the compare
// fails).
func (c *Config) place(ctx context.Context, kv *mvccpb.KeyValue, marker string, b []byte, lease clientv3.LeaseID) (ours bool, err error) {
	resp, err := c.cli.Txn(clientv3.WithRequireLeader(ctx)).
		If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
		Then(clientv3.OpDelete(string(kv.Key)), clientv3.OpPut(marker, string(b), clientv3.WithLease(lease))).
		Else(clientv3.OpGet(marker)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded || onLease(resp.Responses[0].GetResponseRange().Kvs, lease), nil
}

func onLease(kvs []*mvccpb.KeyValue, lease clientv3.LeaseID) bool {
	return len(kvs) > 0 && clientv3.LeaseID(kvs[0].Lease) == lease
}

// waitGone waits for the deletion of every marker, watching from the
// revision after read.
func (c *Config) waitGone(ctx context.Context, markers []string, read int64) error {
	left := make(map[string]bool, len(markers))
	for _, m := range markers {
		left[m] = true
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range c.cli.Watch(wctx, c.prefix+"until/", clientv3.WithPrefix(), clientv3.WithFilterPut(), clientv3.WithRev(read+1)) {
		if err := wr.Err(); err != nil {
			if retry.Permanent(err) {
				return err
			}
			break // compacted or cut off: read again
		}
		for _, ev := range wr.Events {
			delete(left, string(ev.Kv.Key))
		}
		if len(left) == 0 {
			return nil
		}
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return retry.Sleep(ctx, 50*time.Millisecond)
}

// Running is a delay that runs on name: the lost holder's record, and the
// time left on etcd's clock (the marker's lease TTL).
type Running struct {
	Record
	Left time.Duration
}

// List reads the delays running on kind/name, for inspection.
func List(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, name string) ([]Running, error) {
	p := Prefix(ns, kind, name) + "until/"
	resp, err := cli.Get(ctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	var out []Running
	for _, kv := range resp.Kvs {
		var r Running
		if json.Unmarshal(kv.Value, &r.Record) != nil {
			continue
		}
		if ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL > 0 {
			r.Left = time.Duration(ttl.TTL) * time.Second
		}
		out = append(out, r)
	}
	return out, nil
}

func failure(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// closeBound bounds Close's clean releases of lock-delayed holds.
const closeBound = 2 * time.Second

// Close closes o after releasing each of its holds cleanly with its record
// (bounded by closeBound): the Owner's own Close deletes keys but not
// records, which would read as a loss and delay the next holder. What
// fails here, o's Close releases.
func Close[T any](c *Config, o *core.Owner[T], release func(T, context.Context) error) error {
	if c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeBound)
		for _, t := range o.Held() {
			_ = release(t, ctx)
		}
		cancel()
	}
	return o.Close()
}
