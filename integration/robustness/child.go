package robustness

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/fencing"
	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/mutex"
)

// A child is this program run again with RoleEnv set: "holder" takes
// locks and terms in a loop; "cli" is the command `baton lock` runs while
// it holds. Both report on stdout, one JSON message a line, on the shared
// clock; a holder stops when its stdin closes.
const (
	RoleEnv      = "ROBUSTNESS_ROLE"
	endpointsEnv = "ROBUSTNESS_ENDPOINTS"
	configEnv    = "ROBUSTNESS_CONFIG"
)

type childConfig struct {
	ID        int
	Seed      uint64
	Namespace string
	TTL       time.Duration
	Names     []NameInfo
	// MetricLabelLimit is the limit of the holder's Registerer, which it
	// samples at the end of each step (labels.go).
	MetricLabelLimit int
}

type message struct {
	T       string        // "op", "hold", "ended", "regcall", "reg", "metrics"
	Op      *Op           `json:",omitempty"`
	Metrics *MetricSample `json:",omitempty"`
	Hold    *Hold         `json:",omitempty"`
	Reg     *RegOp        `json:",omitempty"`
	Key     string        `json:",omitempty"`
	Token   int64         `json:",omitempty"`
	At      int64         `json:",omitempty"`
	Cause   string        `json:",omitempty"`
	// ID pairs a register write's "regcall" (sent before the write) with
	// its "reg": a child killed in between leaves a write of unknown
	// outcome, which may have applied.
	ID int64 `json:",omitempty"`
	// Late is a "stall"'s: the child was not run from At for Late.
	Late time.Duration `json:",omitempty"`
}

// ChildMain runs a child's role when RoleEnv is set, and reports whether
// it did: a program that can run robustness children calls it first.
func ChildMain() (code int, isChild bool) {
	role := os.Getenv(RoleEnv)
	if role == "" {
		return 0, false
	}
	var err error
	switch role {
	case "holder":
		err = runHolder()
	case "cli":
		err = runCLIHolder()
	case "burn":
		err = runBurner()
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "robustness child:", err)
		return 1, true
	}
	return 0, true
}

type reporter struct {
	mu  sync.Mutex
	enc *json.Encoder
}

func (r *reporter) send(m message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(m)
}

func childSetup() (*childConfig, *clientv3.Client, *reporter, error) {
	var cfg childConfig
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), &cfg); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", configEnv, err)
	}
	cli, err := newClient(strings.Split(os.Getenv(endpointsEnv), ","))
	if err != nil {
		return nil, nil, nil, err
	}
	return &cfg, cli, &reporter{enc: json.NewEncoder(os.Stdout)}, nil
}

func runHolder() error {
	cfg, cli, rep, err := childSetup()
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // stdin closing is the signal to stop
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	reg := prometheus.NewRegistry()
	guard, err := fencing.NewEtcdGuard(cli, append(guardOpts(reg, cfg.MetricLabelLimit), fencing.WithNamespace(cfg.Namespace))...)
	if err != nil {
		return err
	}
	client := fmt.Sprintf("c%d", cfg.ID)
	// Its own stalls, for the checks that judge its clock readings.
	meter := harness.StartMeterNotify(now, func(s harness.Stall) { rep.send(message{T: "stall", At: s.At, Late: s.Late}) })
	defer meter.Stop()
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(50000+cfg.ID)))
	for seq := 0; ctx.Err() == nil; seq++ {
		n := cfg.Names[rng.IntN(len(cfg.Names))]
		step := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		holderStep(ctx, step, cli, guard, reg, rep, client, cfg, n, seq)
		pause(ctx, time.Duration(rng.IntN(100))*time.Millisecond)
	}
	return nil
}

func holderStep(ctx context.Context, rng *rand.Rand, cli *clientv3.Client, guard *fencing.EtcdGuard, reg *prometheus.Registry, rep *reporter,
	client string, cfg *childConfig, n NameInfo, seq int) {
	mopts := metricOpts(reg, cfg.MetricLabelLimit)
	actx, cancel := context.WithTimeout(ctx, time.Duration(500+rng.IntN(5000))*time.Millisecond)
	defer cancel()
	var h handle
	var release func(context.Context) error
	var closeObj func() error
	kind := n.Prim + ".Lock"
	start := now()
	var err error
	value := fmt.Sprintf("%s-%d", client, seq)
	switch n.Prim {
	case "mutex":
		var m *mutex.Mutex
		if m, err = mutex.New(cli, n.Name, append(append(mopts, mutex.WithNamespace(cfg.Namespace), mutex.WithTTL(cfg.TTL)), nameOpts(n)...)...); err == nil {
			closeObj = m.Close
			var l *mutex.Lock
			if l, err = m.Lock(actx); err == nil {
				h, release = l, l.Unlock
			}
		}
	case "election":
		kind = "election.Campaign"
		var e *election.Election
		if e, err = election.New(cli, n.Name, append(append(mopts, election.WithNamespace(cfg.Namespace), election.WithTTL(cfg.TTL)), nameOpts(n)...)...); err == nil {
			closeObj = e.Close
			var t *election.Term
			if t, err = e.Campaign(actx, value); err == nil {
				h, release = t, t.Resign
			}
		}
	}
	if closeObj != nil {
		defer closeObj()
		defer func() { // at the step's end, while the object is open
			s := sampleMetrics(reg, client)
			rep.send(message{T: "metrics", Metrics: &s})
		}()
	}
	ret := now()
	op := &Op{Client: client, Kind: kind, Name: n.Name, Call: start, Return: ret, Err: errString(err)}
	if err != nil {
		rep.send(message{T: "op", Op: op})
		return
	}
	op.Key, op.Token = h.Key(), int64(h.Token())
	rep.send(message{T: "op", Op: op})
	rep.send(message{T: "hold", Hold: &Hold{Prim: n.Prim, Name: n.Name, Client: client, Key: h.Key(), Token: int64(h.Token()), Acquired: ret, Child: true}})
	context.AfterFunc(h.Context(), func() {
		rep.send(message{T: "ended", Key: h.Key(), Token: int64(h.Token()), At: now(), Cause: errString(context.Cause(h.Context()))})
	})
	// Writes without checking anything first: a holder frozen between two
	// of them writes with its old token once resumed.
	for i := 0; i < 2+rng.IntN(4); i++ {
		childEvidence(rep, client, n, h)
		childGuarded(rep, 1000+cfg.ID, client, guard, n, h, fmt.Sprintf("%s.%d", value, i))
		pause(ctx, time.Duration(rng.IntN(300))*time.Millisecond)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	start = now()
	err = release(rctx)
	rep.send(message{T: "op", Op: &Op{Client: client, Kind: n.Prim + ".Release", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: h.Key(), Token: int64(h.Token())}})
}

func childEvidence(rep *reporter, client string, n NameInfo, h handle) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := now()
	resp, err := h.Txn(ctx).Then(clientv3.OpPut(n.Work, h.Key())).Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("not held")
	}
	rep.send(message{T: "op", Op: &Op{Client: client, Kind: n.Prim + ".Txn", Name: n.Name, Call: start, Return: now(), Err: errString(err), Key: h.Key(), Token: int64(h.Token())}})
}

func childGuarded(rep *reporter, id int, client string, g *fencing.EtcdGuard, n NameInfo, h fencing.Holder, value string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := now()
	key := ""
	if k, ok := h.(interface{ Key() string }); ok {
		key = k.Key()
	}
	call := &RegOp{Resource: resource(n), Client: id, Token: int64(h.Token()), Value: value, Outcome: "unknown", Call: start}
	rep.send(message{T: "regcall", Reg: call, ID: start})
	_, err := g.Write(ctx, h, resource(n), clientv3.OpPut(registerKey(n), value), clientv3.OpPut(n.Work, key))
	ret := now()
	op := &RegOp{Resource: resource(n), Client: id, Token: int64(h.Token()), Value: value, Call: start, Return: ret}
	switch {
	case err == nil:
		op.Outcome = "accepted"
	case errors.Is(err, fencing.ErrStale):
		op.Outcome = "stale"
	case isLoss(err):
		op.Outcome = "lost"
	default:
		op.Outcome, op.Return = "unknown", 0
	}
	rep.send(message{T: "reg", Reg: op, ID: start})
	rep.send(message{T: "op", Op: &Op{Client: client, Kind: "fencing.EtcdGuard.Write", Name: n.Name, Call: start, Return: ret, Err: errString(err), Key: key, Token: int64(h.Token())}})
}

// tokenHolder is a holder known only by its key and token, as `baton
// lock` hands them to its command: its transactions compare the key's
// CreateRevision.
type tokenHolder struct {
	cli   *clientv3.Client
	key   string
	token fencing.Token
}

func (t tokenHolder) Token() fencing.Token { return t.token }
func (t tokenHolder) Key() string          { return t.key }
func (t tokenHolder) Context() context.Context {
	return context.Background() // the supervisor, not the command, watches the lock
}
func (t tokenHolder) Txn(ctx context.Context) clientv3.Txn {
	return &ownedTxn{Txn: t.cli.Txn(ctx), own: clientv3.Compare(clientv3.CreateRevision(t.key), "=", int64(t.token))}
}

// ownedTxn adds the ownership comparison to whatever the caller compares.
type ownedTxn struct {
	clientv3.Txn
	own clientv3.Cmp
	cmp bool
}

func (o *ownedTxn) If(cs ...clientv3.Cmp) clientv3.Txn {
	o.cmp = true
	o.Txn = o.Txn.If(append(cs, o.own)...)
	return o
}

func (o *ownedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	if !o.cmp {
		o.If()
	}
	o.Txn = o.Txn.Then(ops...)
	return o
}

func (o *ownedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	if !o.cmp {
		o.If()
	}
	o.Txn = o.Txn.Else(ops...)
	return o
}

// runCLIHolder is the command under `baton lock`: it writes with the key
// and token from its environment.
func runCLIHolder() error {
	cfg, cli, rep, err := childSetup()
	if err != nil {
		return err
	}
	defer cli.Close()
	tok, err := fencing.ParseToken(os.Getenv("BATON_FENCING_TOKEN"))
	if err != nil {
		return err
	}
	h := tokenHolder{cli: cli, key: os.Getenv("BATON_LOCK_KEY"), token: tok}
	n := cfg.Names[0]
	client := fmt.Sprintf("c%d", cfg.ID)
	rep.send(message{T: "hold", Hold: &Hold{Prim: n.Prim, Name: n.Name, Client: client, Key: h.key, Token: int64(tok), Acquired: now(), Child: true}})
	guard, err := fencing.NewEtcdGuard(cli, fencing.WithNamespace(cfg.Namespace))
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(now())))
	for i := 0; i < 1+rng.IntN(3); i++ {
		childEvidence(rep, client, n, h)
		childGuarded(rep, 1000+cfg.ID, client, guard, n, h, fmt.Sprintf("%s-%d.%d", client, tok, i))
		time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
	}
	return nil
}

// child is a running child process, seen from the run.
type child struct {
	r     *runner
	id    int
	cli   bool
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}

	mu      sync.Mutex
	holds   map[string]*Hold // by key/token
	current *Hold
	frozen  bool
}

// childNames are the names children contend on: the exclusive observed
// ones, so that their holds meet the workers'.
func (r *runner) childNames() []NameInfo {
	var out []NameInfo
	for _, n := range r.cfg.names {
		if (n.Prim == "mutex" || n.Prim == "election") && !n.Private {
			out = append(out, n)
		}
	}
	return out
}

// startChild starts holder child i, or, with baton set, the loop that
// runs `baton lock` with a CLI child under it.
func (r *runner) startChild(ctx context.Context, i int, baton string) {
	cfg := childConfig{ID: i, Seed: r.cfg.Seed, Namespace: r.cfg.Namespace, TTL: r.cfg.TTL, Names: r.childNames(), MetricLabelLimit: r.cfg.MetricLabelLimit}
	if baton != "" {
		cfg.Names = cfg.Names[:1] // one mutex
	}
	raw, _ := json.Marshal(cfg)
	env := []string{endpointsEnv + "=" + strings.Join(r.cfg.Target.Endpoints(), ","), configEnv + "=" + string(raw)}
	if baton == "" {
		c := &child{r: r, id: i, done: make(chan struct{}), holds: make(map[string]*Hold)}
		c.cmd = r.cfg.ChildCmd("holder")
		c.cmd.Env = append(append(os.Environ(), c.cmd.Env...), append(env, RoleEnv+"=holder")...)
		c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.start(); err != nil {
			r.h.op(Op{Client: fmt.Sprintf("c%d", i), Kind: "child.Start", Call: now(), Return: now(), Err: err.Error()})
			return
		}
		r.mu.Lock()
		r.children = append(r.children, c)
		r.mu.Unlock()
		return
	}
	c := &child{r: r, id: i, cli: true, done: make(chan struct{}), holds: make(map[string]*Hold)}
	r.mu.Lock()
	r.children = append(r.children, c)
	r.mu.Unlock()
	self := r.cfg.ChildCmd("cli")
	go func() {
		defer close(c.done)
		for ctx.Err() == nil {
			args := []string{"lock", "--endpoints", strings.Join(r.cfg.Target.Endpoints(), ","),
				"--namespace", r.cfg.Namespace, "--ttl", r.cfg.TTL.String(), "--timeout", "5s", cfg.Names[0].Name, "--", self.Path}
			args = append(args, self.Args[1:]...)
			cmd := exec.Command(baton, args...)
			cmd.Env = append(append(os.Environ(), self.Env...), append(env, RoleEnv+"=cli")...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			out, err := cmd.StdoutPipe()
			if err != nil {
				return
			}
			var stderr strings.Builder
			cmd.Stderr = &limitedWriter{w: &stderr, n: 2048}
			start := now()
			if err := cmd.Start(); err != nil {
				r.h.op(Op{Client: fmt.Sprintf("c%d", i), Kind: "baton.lock", Name: cfg.Names[0].Name, Call: start, Return: now(), Err: err.Error()})
				return
			}
			c.read(out)
			err = cmd.Wait()
			msg := errString(err)
			if err != nil {
				msg += ": " + strings.TrimSpace(stderr.String())
			}
			r.h.op(Op{Client: fmt.Sprintf("c%d", i), Kind: "baton.lock", Name: cfg.Names[0].Name, Call: start, Return: now(), Err: msg})
		}
	}()
}

func (c *child) start() error {
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		return err
	}
	c.cmd.Stderr = os.Stderr
	if err := c.cmd.Start(); err != nil {
		return err
	}
	go func() {
		defer close(c.done)
		c.read(out)
		_ = c.cmd.Wait()
	}()
	return nil
}

// read takes the child's messages into the history until EOF; a
// register write whose call came without its return (the child was
// killed in between) is recorded with an unknown outcome.
func (c *child) read(out io.Reader) {
	pending := make(map[int64]RegOp)
	defer func() {
		for _, r := range pending {
			c.r.h.reg(r)
		}
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.T == "" {
			continue // the CLI's own output
		}
		switch m.T {
		case "op":
			c.r.h.op(*m.Op)
		case "stall":
			c.r.h.childStall(fmt.Sprintf("c%d", c.id), harness.Stall{At: m.At, Late: m.Late})
		case "metrics":
			c.r.h.metrics(*m.Metrics)
		case "regcall":
			pending[m.ID] = *m.Reg
		case "reg":
			delete(pending, m.ID)
			c.r.h.reg(*m.Reg)
		case "hold":
			c.mu.Lock()
			c.holds[m.Hold.Key+"/"+strconv.FormatInt(m.Hold.Token, 10)] = m.Hold
			c.current = m.Hold
			c.mu.Unlock()
			c.r.h.hold(m.Hold)
		case "ended":
			c.mu.Lock()
			x := c.holds[m.Key+"/"+strconv.FormatInt(m.Token, 10)]
			if c.current == x {
				c.current = nil
			}
			c.mu.Unlock()
			if x != nil {
				c.r.h.ended(x, m.At, m.Cause)
			}
		}
	}
}

// holdingChild picks a holder process that holds now.
func (r *runner) holdingChild(rng *rand.Rand) *child {
	r.mu.Lock()
	defer r.mu.Unlock()
	var holding []*child
	for _, c := range r.children {
		c.mu.Lock()
		if !c.cli && c.current != nil {
			holding = append(holding, c)
		}
		c.mu.Unlock()
	}
	if len(holding) == 0 {
		return nil
	}
	return holding[rng.IntN(len(holding))]
}

// freeze stops the child with SIGSTOP; its current hold is marked frozen:
// no holder can be told anything while stopped, so only fencing protects
// what it writes once resumed.
func (c *child) freeze() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil {
		c.r.h.mu.Lock()
		c.current.Frozen = true
		c.r.h.mu.Unlock()
	}
	c.frozen = true
	return c.cmd.Process.Signal(syscall.SIGSTOP)
}

func (c *child) thaw() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.frozen || c.cmd == nil || c.cmd.Process == nil {
		return nil
	}
	c.frozen = false
	return c.cmd.Process.Signal(syscall.SIGCONT)
}

// stopChildren closes every holder's stdin and waits for it to exit
// (killing it after a while), and waits for the CLI loop.
func (r *runner) stopChildren() {
	r.mu.Lock()
	children := append([]*child(nil), r.children...)
	r.mu.Unlock()
	for _, c := range children {
		_ = c.thaw()
		if c.stdin != nil {
			_ = c.stdin.Close()
		}
	}
	for _, c := range children {
		select {
		case <-c.done:
		case <-time.After(20 * time.Second):
			if c.cmd != nil && c.cmd.Process != nil {
				_ = c.cmd.Process.Kill()
			}
			<-c.done
		}
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
