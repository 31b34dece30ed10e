package fencing

import (
	"bytes"
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/telemetry"
)

// MaxCASAttempts bounds the compare-and-swap attempts of one EtcdGuard
// call. Each failed attempt means another writer changed the fence key in
// between; the call then returns an error wrapping ErrContended.
const MaxCASAttempts = 8

// EtcdGuard is a Guard whose high-water marks live in etcd, one key per
// resource under /<namespace>/v1/fence/<escaped resource>, holding the
// highest admitted token in decimal. Raising it is a compare-and-swap
// transaction, so any number of processes may share one resource's mark.
// The keys carry no lease: they outlive every holder, which is the point.
type EtcdGuard struct {
	cli    *clientv3.Client
	prefix string
	rej    rejecter
	tr     trace.Tracer
}

var _ Guard = (*EtcdGuard)(nil)

// Holder is a lock or leadership whose transactions commit only while it
// is held: *mutex.Lock and *election.Term are Holders.
type Holder interface {
	Token() Token
	Txn(ctx context.Context) clientv3.Txn
}

// NewEtcdGuard returns a guard that keeps its marks through cli. It takes
// WithNamespace, WithRegisterer, WithMetricLabelLimit, WithLogger and
// WithTracerProvider, and does not contact etcd.
func NewEtcdGuard(cli *clientv3.Client, opts ...Option) (*EtcdGuard, error) {
	const who = "NewEtcdGuard"
	if cli == nil {
		return nil, fmt.Errorf("%w: %s: client must not be nil", ErrInvalid, who)
	}
	c, err := buildConfig(who, opts, true, false)
	if err != nil {
		return nil, err
	}
	rej, err := newRejecter(who, c)
	if err != nil {
		return nil, err
	}
	return &EtcdGuard{cli: cli, prefix: keys.KindPrefix(c.namespace, keys.Fence), rej: rej, tr: telemetry.Tracer(c.tp)}, nil
}

// Key is the etcd key holding resource's highest admitted token.
func (g *EtcdGuard) Key(resource string) string { return g.prefix + keys.Escape(resource) }

// Highest reads the highest token admitted for resource, zero if none.
func (g *EtcdGuard) Highest(ctx context.Context, resource string) (Token, error) {
	resp, err := g.cli.Get(ctx, g.Key(resource))
	if err != nil {
		return 0, fmt.Errorf("fencing: read fence of %q: %w", resource, err)
	}
	h, _, err := g.decode(resource, resp.Kvs)
	return h, err
}

// Admit admits t for resource if it is at least the highest admitted so
// far, raising the mark in etcd when t is higher. A rejection wraps
// ErrStale (*StaleError); it is counted and logged. Inside a trace, the
// check is a span (docs/telemetry.md).
func (g *EtcdGuard) Admit(ctx context.Context, resource string, t Token) error {
	ctx, f := startCheck(ctx, g.tr, telemetry.SpanAdmit, guardEtcd, resource, t)
	_, err := g.commit(ctx, resource, t, g.cli.Txn, nil)
	endCheck(f, err, t)
	return err
}

// Write admits h's token for resource and applies ops in the same etcd
// transaction, which also compares h's ownership: ops apply only if h
// still holds its lock or leadership and no higher token was admitted for
// resource. The response holds the responses of ops, in order.
//
// A stale token returns an error wrapping ErrStale and applies nothing. A
// lost holder returns the holder's error (wrapping mutex.ErrNotHeld or
// election.ErrNotLeader), applies nothing, and ends the holder's Context.
// ops must not touch the fence key itself (etcd rejects a transaction that
// writes one key twice): that returns an error wrapping ErrInvalid.
//
// Inside a trace (such as that of a hold's Context), the write is a span
// (docs/telemetry.md): a rejected write shows in the trace that made it.
func (g *EtcdGuard) Write(ctx context.Context, h Holder, resource string, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	t := h.Token()
	ctx, f := startCheck(ctx, g.tr, telemetry.SpanWrite, guardEtcd, resource, t)
	resp, err := g.write(ctx, h, t, resource, ops)
	endCheck(f, err, t)
	return resp, err
}

func (g *EtcdGuard) write(ctx context.Context, h Holder, t Token, resource string, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	key := g.Key(resource)
	for i, op := range ops {
		if touches(op, key) {
			return nil, fmt.Errorf("%w: op %d touches the fence key %s", ErrInvalid, i, key)
		}
	}
	resp, err := g.commit(ctx, resource, t, h.Txn, ops)
	if err != nil {
		return nil, err
	}
	// The fence put, when there is one, comes first.
	resp.Responses = resp.Responses[len(resp.Responses)-len(ops):]
	return resp, nil
}

// commit runs the compare-and-swap loop. The first attempt guesses that
// the mark already equals t (a holder writing again, one round trip, no
// write to the fence key, so a holder's concurrent writes never conflict);
// a failed attempt reads the mark in its Else branch, and the next one
// compares its ModRevision and raises it.
func (g *EtcdGuard) commit(ctx context.Context, resource string, t Token, txn func(context.Context) clientv3.Txn, ops []clientv3.Op) (*clientv3.TxnResponse, error) {
	if t <= 0 {
		return nil, malformed(resource, t)
	}
	key := g.Key(resource)
	value := t.String()
	cmp := clientv3.Compare(clientv3.Value(key), "=", value)
	then := ops
	for range MaxCASAttempts {
		resp, err := txn(ctx).If(cmp).Then(then...).Else(clientv3.OpGet(key)).Commit()
		if err != nil {
			return nil, fmt.Errorf("fencing: admit token %d for %q: %w", t, resource, err)
		}
		if resp.Succeeded {
			return resp, nil
		}
		high, modRev, err := g.decode(resource, resp.Responses[0].GetResponseRange().GetKvs())
		if err != nil {
			return nil, err
		}
		switch {
		case t < high:
			return nil, g.rej.stale(resource, t, high)
		case t == high:
			cmp, then = clientv3.Compare(clientv3.Value(key), "=", value), ops
		default:
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", modRev)
			then = append([]clientv3.Op{clientv3.OpPut(key, value)}, ops...)
		}
	}
	return nil, fmt.Errorf("%w: %q changed on each of %d attempts to admit token %d", ErrContended, resource, MaxCASAttempts, t)
}

// decode reads a mark and its ModRevision (zero for an absent key).
func (g *EtcdGuard) decode(resource string, kvs []*mvccpb.KeyValue) (Token, int64, error) {
	if len(kvs) == 0 {
		return 0, 0, nil
	}
	high, err := ParseToken(string(kvs[0].Value))
	if err != nil {
		return 0, 0, fmt.Errorf("fencing: fence key of %q holds %q: %w", resource, kvs[0].Value, err)
	}
	return high, kvs[0].ModRevision, nil
}

// touches reports whether op writes or deletes key, or runs a nested
// transaction (whose keys this check does not follow).
func touches(op clientv3.Op, key string) bool {
	switch {
	case op.IsTxn():
		return false
	case op.IsPut():
		return string(op.KeyBytes()) == key
	case op.IsDelete():
		k, end := op.KeyBytes(), op.RangeBytes()
		if len(end) == 0 {
			return string(k) == key
		}
		// A range [k, end); end "\x00" means every key from k on.
		return bytes.Compare([]byte(key), k) >= 0 && (bytes.Equal(end, []byte{0}) || bytes.Compare([]byte(key), end) < 0)
	}
	return false
}
