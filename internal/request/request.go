// Package request asks a holder to let go, and tells the holder.
//
// A request is a key /<ns>/v1/release/<kind>/<escaped name>/<token>,
// put on the holder's lease in a transaction guarded by the holder key's
// CreateRevision, together with an audit record under the request records
// of the namespace's audit trail (keys.RequestAuditPrefix), which only
// requesters, operators (and root) may write: a user without that right is
// refused and nothing is written. The put on the holder's lease also needs
// write permission on every key already attached to that lease (etcd
// checks it), so a holder whose lease carries keys of other namespaces can
// only be asked by a user who may write those too. The
// token in the key makes the request the holder's alone: the next holder
// of the name has another token and never sees it. A request releases
// nothing by itself.
package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/internal/telemetry"
)

// Release is the key kind of requests.
const Release keys.Kind = "release"

// Request is one request to a holder.
type Request struct {
	// Reason is the requester's text, as given: escape it to print it.
	Reason string `json:"reason"`
	// By is who asked: the etcd user when auth is on, and the requester's
	// identity (WithIdentity, or "host:pid").
	By string `json:"by"`
	// At is when it was asked, on the requester's clock.
	At time.Time `json:"at"`
	// Key and Token are the holder's the request was made to.
	Key   string `json:"key"`
	Token int64  `json:"token"`
	// Audit is the key of the audit record written with it.
	Audit string `json:"audit"`
}

// Key is where a request to the holder of kind/name with token lives.
func Key(ns string, kind keys.Kind, name string, token int64) string {
	return keys.KindPrefix(ns, Release) + string(kind) + "/" + keys.Escape(name) + "/" + strconv.FormatInt(token, 10)
}

// ErrNoHolder is returned by Make when nobody holds the name.
var ErrNoHolder = errors.New("nobody holds it")

// auditRecord has the fields of the CLI's audit records.
type auditRecord struct {
	Time     time.Time `json:"time"`
	Action   string    `json:"action"`
	Kind     string    `json:"kind"`
	Name     string    `json:"name"`
	Key      string    `json:"key"`
	Holder   string    `json:"holder"`
	Token    int64     `json:"token"`
	Lease    string    `json:"lease"`
	Reason   string    `json:"reason"`
	Identity string    `json:"etcd_identity"`
	Source   string    `json:"etcd_identity_source,omitempty"`
	By       string    `json:"requested_by"`
	OSUser   string    `json:"os_user"`
	Host     string    `json:"host"`
	Result   string    `json:"result"`
}

// Identity is the etcd user a request was authenticated as, for its
// audit record: Name, and Source, how etcd knew it ("user" for a user name
// and password, "certificate" for a client certificate's CN, "auth
// disabled" when nobody is authenticated). Both empty when unknown.
type Identity struct{ Name, Source string }

// ClientIdentity is the identity of a client that authenticates with a
// user name (cli.Username), else unknown.
func ClientIdentity(cli *clientv3.Client) Identity {
	if cli.Username == "" {
		return Identity{}
	}
	return Identity{Name: cli.Username, Source: "user"}
}

// Made is what Make did.
type Made struct {
	Request
	Holder string // the holder's identity (its key's value)
}

// Make asks the oldest contender under queue (the holder of kind/name in
// namespace ns) to let go, with reason, as by, recording id as the etcd
// identity that asked. It returns ErrNoHolder
// when nobody holds; a permission error (from etcd) when the user may not
// write the request records of the audit trail (or a key on the holder's
// lease), having written nothing.
func Make(ctx context.Context, cli *clientv3.Client, ns string, kind keys.Kind, name, queue, reason, by string, id Identity) (Made, error) {
	osUser, host := "", ""
	if u, err := user.Current(); err == nil {
		osUser = u.Username
	}
	host, _ = os.Hostname()
	for range 3 { // the holder may change between the read and the write
		var g *clientv3.GetResponse
		err := retry.Reads(ctx, func(actx context.Context) (err error) {
			g, err = cli.Get(clientv3.WithRequireLeader(actx), queue, clientv3.WithFirstCreate()...)
			return err
		})
		if err != nil {
			return Made{}, err
		}
		if len(g.Kvs) == 0 {
			return Made{}, ErrNoHolder
		}
		kv := g.Kvs[0]
		now := time.Now().UTC()
		lease := clientv3.LeaseID(kv.Lease)
		akey := keys.RequestAuditPrefix(ns) + now.Format("20060102T150405.000000000Z") + "-request-" + strconv.FormatInt(kv.CreateRevision, 10)
		m := Made{Request: Request{Reason: reason, By: by, At: now, Key: string(kv.Key), Token: kv.CreateRevision, Audit: akey}, Holder: string(kv.Value)}
		rb, _ := json.Marshal(m.Request)
		ab, _ := json.Marshal(auditRecord{Time: now, Action: "request-release", Kind: string(kind), Name: name, Key: m.Key,
			Holder: m.Holder, Token: m.Token, Lease: strconv.FormatInt(int64(lease), 16), Reason: reason, Identity: id.Name,
			Source: id.Source, By: by, OSUser: osUser, Host: host, Result: "requested"})
		var resp *clientv3.TxnResponse
		err = retry.Do(ctx, func(actx context.Context) (err error) { // the same puts again: safe to repeat
			resp, err = cli.Txn(clientv3.WithRequireLeader(actx)).
				If(clientv3.Compare(clientv3.CreateRevision(m.Key), "=", m.Token)).
				Then(clientv3.OpPut(Key(ns, kind, name, m.Token), string(rb), clientv3.WithLease(lease)), clientv3.OpPut(akey, string(ab))).
				Commit()
			return err
		})
		if err != nil {
			return Made{}, err
		}
		if resp.Succeeded {
			return m, nil
		}
	}
	return Made{}, fmt.Errorf("%w: the holder changed three times while asking", ErrNoHolder)
}

// KeyOf is the request key for the holder whose key is holderKey and
// token is token ("/<ns>/v1/<kind>/<name>/<segment>").
func KeyOf(holderKey string, token int64) string {
	ns := keys.NamespaceOf(holderKey)
	rest := holderKey[len(ns):]
	return ns + string(Release) + "/" + rest[:strings.LastIndexByte(rest, '/')] + "/" + strconv.FormatInt(token, 10)
}

// Watch sends the requests made to the holder of each of reqKeys (its
// Key) on out, the ones already made first, until ctx ends; wg counts its
// goroutines. A full out drops a request: a holder only needs to know one
// is pending.
func Watch(ctx context.Context, cli *clientv3.Client, reqKeys []string, out chan<- Request, wg *sync.WaitGroup) {
	send := func(v []byte) {
		var r Request
		if json.Unmarshal(v, &r) != nil {
			return
		}
		telemetry.HoldFrom(ctx).ReleaseRequested(r.By) // ctx is the holder's: it carries the hold span
		select {
		case out <- r:
		default:
		}
	}
	for _, k := range reqKeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				var g *clientv3.GetResponse
				err := retry.Reads(ctx, func(actx context.Context) (err error) {
					g, err = cli.Get(clientv3.WithRequireLeader(actx), k)
					return err
				})
				if err != nil {
					if retry.Permanent(err) {
						return
					}
					continue
				}
				for _, kv := range g.Kvs {
					send(kv.Value)
				}
				wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
				for wr := range cli.Watch(wctx, k, clientv3.WithRev(g.Header.Revision+1), clientv3.WithFilterDelete()) {
					if wr.Err() != nil {
						break
					}
					for _, ev := range wr.Events {
						send(ev.Kv.Value)
					}
				}
				cancel()
				_ = retry.Sleep(ctx, 50*time.Millisecond)
			}
		}()
	}
}

// MaxReasonBytes bounds a request's reason.
const MaxReasonBytes = 1024

// Ask is the RequestRelease of every primitive: it validates name, reason
// and opts (WithNamespace and WithIdentity are used), asks the holder of
// kind/name, and wraps ErrNoHolder in notHeld.
func Ask(ctx context.Context, cli *clientv3.Client, kind keys.Kind, noun, name, reason string, opts []config.Option, notHeld error) error {
	if err := keys.ValidateName(noun+" name", name); err != nil {
		return err
	}
	if reason == "" || len(reason) > MaxReasonBytes || !utf8.ValidString(reason) {
		return fmt.Errorf("%w: RequestRelease: reason must be 1 to %d bytes of UTF-8", keys.ErrInvalid, MaxReasonBytes)
	}
	cfg, err := config.Build(cli, opts)
	if err != nil {
		return err
	}
	by, err := cfg.HolderIdentity()
	if err != nil {
		return err
	}
	if cli.Username != "" {
		by = cli.Username + " (" + by + ")"
	}
	_, err = Make(ctx, cli, cfg.Namespace, kind, name, keys.Prefix(cfg.Namespace, kind, name), reason, by, ClientIdentity(cli))
	if errors.Is(err, ErrNoHolder) {
		return fmt.Errorf("%w: nobody holds %s %q: %w", notHeld, noun, name, err)
	}
	if err != nil {
		return fmt.Errorf("%s %q: request release: %w", noun, name, err)
	}
	return nil
}

// Lazy is a handle's watch of its release requests, started by the first
// Chan; the zero value is ready. It costs a pointer until then.
type Lazy struct{ p atomic.Pointer[lazyWatch] }

type lazyWatch struct {
	ch     chan Request
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Chan returns the channel of requests, starting the watch of the
// requests to the holders with the given keys and token until ctx ends.
func (z *Lazy) Chan(ctx context.Context, cli *clientv3.Client, holderKeys []string, token int64) <-chan Request {
	if w := z.p.Load(); w != nil {
		return w.ch
	}
	w := &lazyWatch{ch: make(chan Request, 1)}
	if !z.p.CompareAndSwap(nil, w) {
		return z.p.Load().ch
	}
	ctx, w.cancel = context.WithCancel(ctx)
	ks := make([]string, len(holderKeys))
	for i, k := range holderKeys {
		ks[i] = KeyOf(k, token)
	}
	Watch(ctx, cli, ks, w.ch, &w.wg)
	return w.ch
}

// Stop ends the watch, if started, and waits for it.
func (z *Lazy) Stop() {
	if w := z.p.Load(); w != nil {
		w.cancel()
		w.wg.Wait()
	}
}
