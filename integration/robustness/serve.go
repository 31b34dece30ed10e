package robustness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	batonv1 "github.com/batonhq/baton/cmd/baton/gen/baton/v1"
	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
	"github.com/batonhq/baton/mutex"
)

// TrafficServe: callers that contend through a `baton serve` process
// (Config.Baton) on the lanes' names, with the generated Connect client,
// over gRPC and Connect's HTTP/JSON: Hold streams kept by heartbeats,
// fenced writes with the token of held, releases, dropped streams, callers
// that stop heartbeating and callers cut off from the server; and members
// of a shard group on Shards streams (serveshards.go), owning shards,
// acknowledging moved shards' drains promptly, late or never, leaving or
// going silent, with fenced writes under each shard's token. A caller
// counts itself told when its stream says lost, or when the validity of
// its last heartbeat's reply, counted from the heartbeat's send time on
// its own clock, has passed (docs/serve.md): the checks judge it by that
// rule, as they judge the library's holders by their Context.
const TrafficServe = "serve"

// serveProc is the serve kind's `baton serve` process: its etcd client
// behind a partition of its own (the network faults' "serve.server"),
// serving plaintext on a loopback port.
type serveProc struct {
	cmd    *exec.Cmd
	part   *cluster.Partition // its etcd client's
	addr   string             // host:port
	exited chan struct{}
	stderr strings.Builder
}

// startServe starts `baton serve` on the run's cluster and namespace and
// waits for the address it serves on.
func (m *mech) startServe(ctx context.Context) (*serveProc, error) {
	part, eps, err := cluster.NewPartition(m.r.cfg.Target.Endpoints())
	if err != nil {
		return nil, err
	}
	m.r.addPart(m.client()+".server", part) // closed with the others'
	p := &serveProc{part: part, exited: make(chan struct{})}
	p.cmd = exec.Command(m.r.cfg.Baton, "serve", "--listen", "127.0.0.1:0", "--endpoints", strings.Join(eps, ","),
		"--namespace", m.r.cfg.Namespace, "--shutdown-timeout", "5s")
	p.cmd.Env = os.Environ() // a planted bug's switch with it
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = &limitedWriter{w: &p.stderr, n: 4096}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "serving on http://"); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t := time.NewTimer(20 * time.Second)
	defer t.Stop()
	select {
	case p.addr = <-addr:
		return p, nil
	case <-p.exited:
		return nil, fmt.Errorf("baton serve exited: %s", strings.TrimSpace(p.stderr.String()))
	case <-t.C:
	case <-ctx.Done():
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return nil, errors.New("baton serve did not say where it serves")
}

// stopServe ends the serve process with SIGTERM (every hold's key is
// deleted and its lease revoked before it exits), SIGKILL after 15 s.
func (m *mech) stopServe() {
	p := m.srv
	if p == nil {
		return
	}
	m.srv = nil
	start := now()
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	var err error
	if st := p.cmd.ProcessState; st == nil || !st.Success() {
		err = fmt.Errorf("baton serve: %v: %s", st, strings.TrimSpace(p.stderr.String()))
	}
	m.r.h.op(Op{Client: m.client() + ".server", Kind: "serve.Stop", Call: start, Return: now(), Err: errString(err)})
}

// serveTarget is what a serve caller holds: one name, or a Set's.
type serveTarget struct {
	names  []NameInfo
	kind   batonv1.LockKind
	limit  uint32
	shared bool
	op     string // the acquisition's Op.Kind
	rel    string // the release's
}

func (m *mech) serveTargets() []serveTarget {
	n := func(prim, name string) NameInfo { return m.r.name(prim, name) }
	mu := batonv1.LockKind_LOCK_KIND_MUTEX
	return []serveTarget{
		{names: []NameInfo{n("mutex", "m0")}, kind: mu, op: "serve.mutex.Lock", rel: "serve.mutex.Release"},
		{names: []NameInfo{n("mutex", "m1")}, kind: mu, op: "serve.mutex.Lock", rel: "serve.mutex.Release"},
		{names: []NameInfo{n("mutex", "m0"), n("mutex", "m3")}, kind: mu, op: "serve.mutex.Set.Lock", rel: "serve.mutex.Set.Release"},
		{names: []NameInfo{n("mutex", "m3"), n("mutex", "m4")}, kind: mu, op: "serve.mutex.Set.Lock", rel: "serve.mutex.Set.Release"},
		{names: []NameInfo{n("semaphore", "s0")}, kind: batonv1.LockKind_LOCK_KIND_SEMAPHORE, limit: 2, shared: true, op: "serve.semaphore.Acquire", rel: "serve.semaphore.Release"},
		{names: []NameInfo{n("rwmutex", "rw0")}, kind: batonv1.LockKind_LOCK_KIND_WRITE, op: "serve.rwmutex.Lock", rel: "serve.rwmutex.Release"},
		{names: []NameInfo{n("rwmutex", "rw0")}, kind: batonv1.LockKind_LOCK_KIND_READ, shared: true, op: "serve.rwmutex.RLock", rel: "serve.rwmutex.Release"},
	}
}

// How a serve caller ends its hold.
const (
	serveRelease = iota // Release, then the stream closes
	serveDrop           // the stream dropped while it holds: the server deletes the key
	serveSilent         // stops heartbeating, still reading: told by its validity, then lost
	serveCutOff         // cut off from the server (neither heartbeats nor lost get through): told by its validity alone
)

var serveEnds = []string{"release", "drop", "silent", "cut-off"}

// serve: 4 to 6 callers at once through the serve process, each holding a
// random target a moment with fenced writes and ending as one of
// serveEnds, beside 3 or 4 members of the shard group sv0 on Shards
// streams (serveShards); one round in three, while the fault loop
// injects, the server is stopped (SIGSTOP) past the TTL and resumed: its
// holders and members must count themselves lost by their validity
// before the lease expires. Another round in three, its first caller is
// cut off, and the server's etcd link with it (cutServeLink).
func (m *mech) serve(ctx context.Context, rng *rand.Rand) {
	if m.srv == nil {
		start := now()
		p, err := m.startServe(ctx)
		m.r.h.op(Op{Client: m.client() + ".server", Kind: "serve.Start", Call: start, Return: now(), Err: errString(err)})
		if err != nil {
			pause(ctx, time.Second)
			return
		}
		m.srv = p
	}
	select {
	case <-m.srv.exited:
		m.r.h.op(Op{Client: m.client() + ".server", Kind: "serve.Exited", Call: now(), Return: now(), Err: strings.TrimSpace(m.srv.stderr.String())})
		m.srv = nil
		return
	default:
	}
	guard, err := fencing.NewEtcdGuard(m.cli, append(guardOpts(m.r.kindsReg, m.r.cfg.MetricLabelLimit), fencing.WithNamespace(m.r.cfg.Namespace))...)
	if err != nil {
		return
	}
	targets := m.serveTargets()
	var cut chan struct{}
	if m.runs%3 == 1 && m.r.quietFrom.Load() == 0 {
		cut = make(chan struct{}, 1)
	}
	var wg sync.WaitGroup
	k := 4 + rng.IntN(3)
	for i := 0; i < k; i++ {
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		c := &serveCaller{m: m, who: fmt.Sprintf("%s.s%d-%d", m.client(), i, m.runs), id: 3000 + 8*(m.runs%1000) + i,
			t: targets[g.IntN(len(targets))], end: g.IntN(len(serveEnds)), grpc: g.IntN(2) == 0, guard: guard, cut: cut}
		if cut != nil && i == 0 {
			c.end, c.cutsLink = serveCutOff, true
		}
		wg.Go(func() {
			pause(ctx, time.Duration(g.IntN(200))*time.Millisecond)
			c.run(ctx, g)
		})
	}
	{
		// One caller a round holds q0, a name of its own, and is asked to
		// let go by an operator before it releases.
		g := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		c := &serveCaller{m: m, who: fmt.Sprintf("%s.q-%d", m.client(), m.runs), id: 3000 + 8*(m.runs%1000) + 7,
			t:   serveTarget{names: []NameInfo{m.r.name("mutex", "q0")}, kind: batonv1.LockKind_LOCK_KIND_MUTEX, op: "serve.mutex.Lock", rel: "serve.mutex.Release"},
			end: serveRelease, ask: true, grpc: g.IntN(2) == 0, guard: guard}
		wg.Go(func() { c.run(ctx, g) })
	}
	sg := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
	wg.Go(func() { m.serveShards(ctx, sg) })
	if m.runs%3 == 2 && m.r.quietFrom.Load() == 0 {
		wg.Go(func() { m.freezeServe(ctx, rng) })
	}
	wg.Wait()
}

// freezeServe stops the serve process with SIGSTOP for a TTL and 0.5 to
// 1.5 s, a moment into the round, recorded as a holder-freeze fault of
// its client.
func (m *mech) freezeServe(ctx context.Context, rng *rand.Rand) {
	pause(ctx, time.Duration(500+rng.IntN(1500))*time.Millisecond)
	p := m.srv
	if ctx.Err() != nil || p == nil {
		return
	}
	start := now()
	err := p.cmd.Process.Signal(syscall.SIGSTOP)
	if err == nil {
		time.Sleep(m.r.cfg.TTL + time.Duration(500+rng.IntN(1000))*time.Millisecond)
		err = p.cmd.Process.Signal(syscall.SIGCONT)
	}
	f := Fault{Kind: FaultFreeze, Detail: "baton serve", Start: start, End: now(), Clients: []string{m.client() + ".server"}}
	if err != nil {
		f.Detail += " (" + err.Error() + ")"
	}
	m.r.h.fault(f)
}

// cutServeLink blackholes the serve process's etcd link, with a caller
// (of key) cut off from the server: the server's lease of key loses its
// renewals while the caller counts on the validity it was given, and the
// server must keep the lease's keys until that validity has run out
// (internal/lease's KeysToDeadline, planted bug A). The link heals once
// the lease has less than a third of its TTL left at etcd (the server
// counts it lost from two thirds on), so that what the server does at the
// loss reaches etcd before the lease's deadline; or once a caller of the
// round was told of a loss to failed renewals (lost); or after a TTL.
// Recorded as a blackhole fault of the server's client.
func (m *mech) cutServeLink(ctx context.Context, key string, lost <-chan struct{}) {
	p := m.srv
	if p == nil {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, time.Second)
	resp, err := m.cli.Get(gctx, key)
	cancel()
	if err != nil || len(resp.Kvs) == 0 {
		return // gone already: nothing to cut under
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	start := now()
	p.part.Blackhole()
	t := time.NewTimer(m.r.cfg.TTL)
	defer t.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-lost:
			break wait
		case <-t.C:
			break wait
		case <-ctx.Done():
			break wait
		case <-tick.C:
		}
		tctx, cancel := context.WithTimeout(ctx, time.Second)
		ttl, err := m.cli.TimeToLive(tctx, lease)
		cancel()
		if err == nil && time.Duration(ttl.TTL)*time.Second*3 < m.r.cfg.TTL { // TTL: whole seconds left, rounded down
			break
		}
	}
	heal(p.part)
	m.r.h.fault(Fault{Kind: FaultBlackhole, Detail: "baton serve's etcd link", Start: start, End: now(), Clients: []string{m.client() + ".server"}})
}

// serveCaller is one Hold stream's caller.
type serveCaller struct {
	m     *mech
	who   string
	id    int // its register writes'
	t     serveTarget
	end   int
	grpc  bool // gRPC over h2c; else Connect's JSON over HTTP/1.1
	guard *fencing.EtcdGuard
	ask   bool // an operator asks it to let go before it releases (askRelease)
	// cut, in a round that cuts the server's etcd link, is told of a
	// loss to failed renewals; cutsLink: this cut-off caller cuts it.
	cut      chan struct{}
	cutsLink bool
}

// client is a Connect client of the server, of the caller's protocol, on
// connections of its own; through a partition of its own (cut) when the
// caller is to be cut off.
func (c *serveCaller) client() (batonv1connect.BatonServiceClient, func(), *cluster.Partition, error) {
	addr := c.m.srv.addr
	var part *cluster.Partition
	if c.end == serveCutOff {
		p, eps, err := cluster.NewPartition([]string{addr})
		if err != nil {
			return nil, nil, nil, err
		}
		part, addr = p, eps[0]
		if i := strings.Index(addr, "://"); i >= 0 {
			addr = addr[i+3:]
		}
	}
	tr := &http.Transport{Protocols: new(http.Protocols)}
	opts := []connect.ClientOption{connect.WithProtoJSON()}
	if c.grpc {
		tr.Protocols.SetUnencryptedHTTP2(true)
		opts = []connect.ClientOption{connect.WithGRPC()}
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	closeAll := func() {
		tr.CloseIdleConnections()
		if part != nil {
			part.Close()
		}
	}
	return batonv1connect.NewBatonServiceClient(&http.Client{Transport: tr}, "http://"+addr, opts...), closeAll, part, nil
}

// serveHold is a serve caller's hold as the checks see it: its token and
// keys, a Context that ends when the caller counts itself told, and the
// caller's validity deadline (Hold.validTo).
type serveHold struct {
	tokenHolder
	ctx    context.Context
	cancel context.CancelCauseFunc
	valid  *atomic.Int64
	holds  []*Hold
	r      *runner

	mu    sync.Mutex
	over  bool
	timer *time.Timer
}

func (h *serveHold) Context() context.Context { return h.ctx }

// finish ends the hold once, at at, with cause.
func (h *serveHold) finish(at int64, cause string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finishLocked(at, cause)
}

func (h *serveHold) finishLocked(at int64, cause string) {
	if h.over {
		return
	}
	if v := h.valid.Load(); at >= v {
		at, cause = v, "validity expired" // its own clock told it first
	}
	h.over = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.cancel(errors.New(cause))
	for _, x := range h.holds {
		h.r.h.ended(x, at, cause)
	}
}

// extend sets the validity deadline from a reply to a heartbeat sent at
// sent, unless the caller already counts itself told: a deadline passed
// is final.
func (h *serveHold) extend(sent int64, validity time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := now()
	if h.over {
		return
	}
	if old := h.valid.Load(); t >= old {
		h.finishLocked(old, "validity expired")
		return
	}
	d := sent + int64(validity)
	h.valid.Store(d)
	if h.timer != nil {
		h.timer.Stop()
	}
	h.timer = time.AfterFunc(time.Duration(d-t), func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if v := h.valid.Load(); !h.over && now() >= v {
			h.finishLocked(v, "validity expired")
		}
	})
}

// run is one caller: a Hold stream until held (or refused), a hold with
// heartbeats and fenced writes, and its end.
func (c *serveCaller) run(ctx context.Context, rng *rand.Rand) {
	r := c.m.r
	svc, closeClient, part, err := c.client()
	if err != nil {
		return
	}
	defer closeClient()
	req := &batonv1.HoldRequest{Namespace: r.cfg.Namespace, Kind: c.t.kind, Limit: c.t.limit, Ttl: durationpb.New(r.cfg.TTL), Identity: c.who}
	for _, n := range c.t.names {
		req.Names = append(req.Names, n.Name)
	}
	// The lanes' names are busy (their holders sleep past the TTL now
	// and then): a wait of 5 to 10 s.
	if rng.IntN(6) == 0 {
		req.Try = true
	} else {
		req.WaitTimeout = durationpb.New(time.Duration(5000+rng.IntN(5000)) * time.Millisecond)
	}
	sctx, drop := context.WithCancel(context.WithoutCancel(ctx))
	defer drop()
	name := c.t.names[0].Name
	if len(c.t.names) > 1 {
		var ns []string
		for _, n := range c.t.names {
			ns = append(ns, n.Name)
		}
		name = strings.Join(ns, "+")
	}
	start := now()
	stream, err := svc.Hold(sctx, connect.NewRequest(req))
	var held *batonv1.Held
	if err == nil {
		acquired := make(chan struct{})
		go func() { // the client's own bound on the wait: it drops the stream
			select {
			case <-acquired:
			case <-time.After(15 * time.Second):
				drop()
			case <-sctx.Done():
			}
		}()
		switch {
		case !stream.Receive():
			err = stream.Err()
			if err == nil {
				err = errors.New("the stream ended before held")
			}
		case stream.Msg().GetHeld() == nil:
			err = fmt.Errorf("first message not held: %v", stream.Msg())
		default:
			held = stream.Msg().GetHeld()
		}
		close(acquired)
	}
	ret := now()
	op := Op{Client: c.who, Kind: c.t.op, Name: name, Call: start, Return: ret, Err: errString(err)}
	if err != nil {
		r.h.op(op)
		return
	}
	keys := held.GetKeys()
	if len(keys) == 0 {
		op.Err = "held without keys"
		r.h.op(op)
		return
	}
	op.Key, op.Token = keys[0], held.GetToken()
	r.h.op(op)
	hctx, cancel := context.WithCancelCause(context.Background())
	h := &serveHold{tokenHolder: tokenHolder{cli: c.m.cli, key: keys[0], token: fencing.Token(held.GetToken())}, ctx: hctx, cancel: cancel,
		valid: new(atomic.Int64), r: r}
	h.valid.Store(start + int64(held.GetValidity().AsDuration())) // counted from the Hold's send
	var members []NameInfo
	var mkeys []string
	for _, n := range c.t.names {
		for _, k := range keys {
			if strings.HasPrefix(k, n.Prefix) {
				x := &Hold{Prim: n.Prim, Name: n.Name, Client: c.who, Key: k, Token: held.GetToken(), Shared: c.t.shared, Acquired: ret, validTo: h.valid}
				r.h.acquired(x, n, hctx.Done())
				h.holds = append(h.holds, x)
				members, mkeys = append(members, n), append(mkeys, k)
			}
		}
	}
	h.extend(start, held.GetValidity().AsDuration()) // arms the timer
	// The stream: lost ends the hold; release_requested is sent on asked.
	streamDone := make(chan struct{})
	asked := make(chan struct{}, 1)
	go func() {
		defer close(streamDone)
		for stream.Receive() {
			if stream.Msg().GetReleaseRequested() != nil {
				select {
				case asked <- struct{}{}:
				default:
				}
			}
			if l := stream.Msg().GetLost(); l != nil {
				h.finish(now(), "lost: "+l.GetCause().String()+": "+l.GetMessage())
				if l.GetCause() == batonv1.Cause_CAUSE_RENEWAL_FAILED && c.cut != nil {
					select {
					case c.cut <- struct{}{}:
					default:
					}
				}
				t := now()
				r.h.op(Op{Client: c.who, Kind: "serve.Lost." + l.GetCause().String(), Name: name, Call: t, Return: t, Key: keys[0], Token: held.GetToken()})
			}
		}
	}()
	// Heartbeats, until stopped.
	beatCtx, stopBeats := context.WithCancel(context.Background())
	beating := make(chan struct{})
	interval := held.GetHeartbeatInterval().AsDuration()
	if interval <= 0 {
		interval = r.cfg.TTL / 5
	}
	go func() {
		defer close(beating)
		for {
			pause(beatCtx, interval)
			if beatCtx.Err() != nil || hctx.Err() != nil {
				return
			}
			bctx, bcancel := context.WithTimeout(beatCtx, 2*interval)
			sent := now()
			resp, err := svc.Heartbeat(bctx, connect.NewRequest(&batonv1.HeartbeatRequest{HoldId: held.GetHoldId()}))
			bcancel()
			if err == nil {
				h.extend(sent, resp.Msg.GetValidity().AsDuration())
			}
			if beatCtx.Err() == nil {
				r.h.op(Op{Client: c.who, Kind: "serve.Heartbeat", Name: name, Call: sent, Return: now(), Err: errString(err), Key: keys[0], Token: held.GetToken()})
			}
			if connect.CodeOf(err) == connect.CodeFailedPrecondition || connect.CodeOf(err) == connect.CodeNotFound {
				return // ended: the stream says why
			}
		}
	}()
	defer func() {
		stopBeats()
		<-beating
		drop()
		<-streamDone
		h.finish(now(), "stream closed")
	}()

	// The hold: fenced writes, checking nothing first.
	writes := 1 + rng.IntN(3)
	if c.end == serveSilent || c.end == serveCutOff {
		writes = 1
	}
	for i := 0; i < writes; i++ {
		c.write(members, mkeys, h, i)
		pause(ctx, time.Duration(rng.IntN(400))*time.Millisecond)
	}
	switch c.end {
	case serveRelease:
		if c.ask {
			c.askRelease(ctx, members[0], keys[0], held.GetToken(), hctx, asked)
		}
		if hctx.Err() != nil {
			return
		}
		stopBeats()
		<-beating
		h.finish(now(), "released") // it knows before it asks
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := now()
		_, err := svc.Release(rctx, connect.NewRequest(&batonv1.ReleaseRequest{HoldId: held.GetHoldId()}))
		rcancel()
		r.h.op(r.leaseAfter(Op{Client: c.who, Kind: c.t.rel, Name: name, Call: start, Return: now(), Err: errString(err), Key: keys[0], Token: held.GetToken()}))
		select { // released, then the stream ends
		case <-streamDone:
		case <-time.After(2 * time.Second):
		}
	case serveDrop:
		if hctx.Err() != nil {
			return
		}
		h.finish(now(), "stream dropped") // it knows before it drops
	case serveSilent, serveCutOff:
		stopBeats()
		<-beating
		if part != nil {
			part.Blackhole()
		}
		if c.cutsLink {
			c.m.cutServeLink(ctx, keys[0], c.cut)
		}
		// Told by its validity (or, still reading, by lost), it writes
		// once more after: fenced, refused.
		select {
		case <-hctx.Done():
		case <-time.After(2 * r.cfg.TTL):
		}
		c.write(members, mkeys, h, writes)
		if c.end == serveSilent {
			select { // lost comes when the server's deadline passes
			case <-streamDone:
			case <-time.After(r.cfg.TTL):
			}
		}
	}
}

// askRelease has an operator ask the holder of n to let go
// (mutex.RequestRelease, as `baton unlock --request` does) and waits, up
// to serveAskWait, for the request on the caller's stream (asked) or the
// hold's end (hctx); the request-delivered check judges the wait.
func (c *serveCaller) askRelease(ctx context.Context, n NameInfo, key string, token int64, hctx context.Context, asked <-chan struct{}) {
	r := c.m.r
	rctx, rcancel := context.WithTimeout(context.Background(), 3*time.Second)
	start := now()
	err := mutex.RequestRelease(rctx, c.m.cli, n.Name, "robustness: let go", mutex.WithNamespace(r.cfg.Namespace), mutex.WithIdentity(c.who+".asker"))
	rcancel()
	r.h.op(Op{Client: c.who + ".asker", Kind: "serve.RequestRelease", Name: n.Name, Call: start, Return: now(), Err: errString(err)})
	if err != nil {
		return
	}
	kind := opReleaseRequested
	t := time.NewTimer(serveAskWait)
	defer t.Stop()
	select {
	case <-asked:
	case <-hctx.Done():
		kind += ".lost"
	case <-t.C:
		kind += ".timeout"
	case <-ctx.Done():
		kind += ".stopped"
	}
	r.h.op(Op{Client: c.who, Kind: kind, Name: n.Name, Call: start, Return: now(), Key: key, Token: token})
}

// A serve caller's wait for an operator's request on its stream: op
// opReleaseRequested when it came, with ".timeout" when serveAskWait
// passed first (".lost" and ".stopped": the hold or the run ended).
const (
	opReleaseRequested = "serve.ReleaseRequested"
	serveAskWait       = 5 * time.Second
)

// write is a fenced write of the evidence of holding, with the hold's
// token: one transaction guarded by every key, to each name's work key;
// and for a mutex of the lanes, a write of its register through the etcd
// guard.
func (c *serveCaller) write(members []NameInfo, keys []string, h *serveHold, i int) {
	r := c.m.r
	if len(members) == 1 {
		r.evidence(c.who, members[0], h)
		if members[0].Prim == "mutex" && !members[0].Private {
			r.guarded(c.id, c.who, c.guard, members[0], h, fmt.Sprintf("%s.%d", c.who, i))
		}
		return
	}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for j, n := range members {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(keys[j]), "=", int64(h.token)))
		ops = append(ops, clientv3.OpPut(n.Work, keys[j]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := now()
	resp, err := c.m.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("not held")
	}
	var names []string
	for _, n := range members {
		names = append(names, n.Name)
	}
	r.h.op(Op{Client: c.who, Kind: "serve.mutex.Set.Txn", Name: strings.Join(names, "+"), Call: start, Return: now(), Err: errString(err), Token: int64(h.token)})
}
