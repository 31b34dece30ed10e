package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/cmd/baton/gen/baton/v1/batonv1connect"
	"github.com/batonhq/baton/internal/telemetry"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/rbac"
)

// Config is a Server's settings.
type Config struct {
	// Client is the one etcd client of every call.
	Client *clientv3.Client
	// Namespace is the namespace of a request that names none.
	Namespace string
	// MaxTTL caps a hold's TTL (default mutex.DefaultMaxTTL).
	MaxTTL time.Duration
	// MaxHolds and MaxHoldsPerIdentity bound the Hold, Lead and Shards
	// streams open, waiting or holding (defaults 10,000 and 1,000).
	MaxHolds, MaxHoldsPerIdentity int
	// Policy, when PolicyFile is set, is checked on every call.
	Policy     rbac.Policy
	PolicyFile string
	// Registerer receives the service's and the library's metrics.
	Registerer prometheus.Registerer
	// Logger logs each hold's end (default: none).
	Logger *zap.Logger
	// TracerProvider records a span for each call (a Hold or Lead stream,
	// with the library's wait and hold spans under it, a unary call, an
	// Observe stream), a child of the caller's traceparent (default: the
	// global provider, a no-op until one is installed).
	TracerProvider trace.TracerProvider

	hooks *hooks
}

// hooks are pause points for tests: each is called, when set, at the
// step its name says.
type hooks struct {
	// beforeUnlock: the hold ended (lost already sent), its key not yet deleted.
	beforeUnlock func(id string, cause error)
	// releaseWaiting: a Release asked the hold's loop and waits for the delete.
	releaseWaiting func(id string)
	// beforeFollow: a hold was sent held and does not yet follow its
	// release requests.
	beforeFollow func(id string)
	// requestsSeen: a namespace's watch of release requests applied those
	// up to rev; -1: it ended, refused.
	requestsSeen func(ns string, rev int64)
	// lateSend: a send's write deadline passed; its timer is about to set
	// it.
	lateSend func()
	// drainTimedOut: a moved shard's drain deadline passed unacknowledged.
	drainTimedOut func(shard int)
}

// Server serves the BatonService: every call of the API (the embedded
// handler answers UNIMPLEMENTED only for calls a later API adds).
type Server struct {
	batonv1connect.UnimplementedBatonServiceHandler

	cfg      Config
	cli      *clientv3.Client
	policy   *policy
	sessions *sessions
	requests *requestWatch
	limits   *limits
	metrics  *metrics
	holds    holdTable
	log      *zap.Logger
	tracer   trace.Tracer

	// stopCtx ends, with errServerShutdown, when Shutdown begins: every
	// hold and wait then ends.
	stopCtx  context.Context
	stop     context.CancelCauseFunc
	mu       sync.Mutex // guards stopping and wg.Add
	stopping bool
	wg       sync.WaitGroup // streams in flight
}

// MaxRequestBytes bounds a request message: a set's 127 names of 256 bytes
// fit many times over; more is RESOURCE_EXHAUSTED, never read whole.
const MaxRequestBytes = 1 << 20

// Defaults of Config.
const (
	DefaultMaxHolds            = 10000
	DefaultMaxHoldsPerIdentity = 1000
)

// New returns a Server; it contacts etcd only when called.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("serve: Config.Client must not be nil")
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = mutex.DefaultMaxTTL
	}
	if cfg.MaxHolds == 0 {
		cfg.MaxHolds = DefaultMaxHolds
	}
	if cfg.MaxHoldsPerIdentity == 0 {
		cfg.MaxHoldsPerIdentity = DefaultMaxHoldsPerIdentity
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg: cfg, cli: cfg.Client, metrics: m, log: cfg.Logger,
		sessions: newSessions(cfg.Client, cfg.MaxTTL, cfg.Registerer, cfg.Logger, cfg.TracerProvider),
		tracer:   telemetry.Tracer(cfg.TracerProvider),
		limits:   newLimits(cfg.MaxHolds, cfg.MaxHoldsPerIdentity),
		holds:    holdTable{m: make(map[string]*hold)},
	}
	if cfg.PolicyFile != "" {
		s.policy = &policy{file: cfg.PolicyFile, p: cfg.Policy}
	}
	s.stopCtx, s.stop = context.WithCancelCause(context.Background())
	s.requests = newRequestWatch(cfg.Client, cfg.Logger, s.stopCtx)
	if cfg.hooks != nil {
		s.requests.seen = cfg.hooks.requestsSeen
	}
	return s, nil
}

// Handler serves the BatonService (gRPC, gRPC-Web and Connect's
// HTTP/JSON on one path) and grpc.health.v1, each request knowing its
// caller (mTLS, Unix socket or TCP) and its response controller (the
// write deadline of a stream's messages).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(batonv1connect.NewBatonServiceHandler(s, connect.WithReadMaxBytes(MaxRequestBytes), connect.WithInterceptors(spans{s})))
	mux.Handle(grpchealth.NewHandler(grpchealth.NewStaticChecker(batonv1connect.BatonServiceName)))
	return withCaller(withWriter(mux))
}

// enter counts a stream in, unless Shutdown began.
func (s *Server) enter() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return connect.NewError(connect.CodeUnavailable, errServerShutdown)
	}
	s.wg.Add(1)
	return nil
}

// Shutdown ends every hold: each stream gets lost with CAUSE_SERVER_SHUTDOWN
// at once, then its key is deleted; waiting streams end with UNAVAILABLE;
// new ones are refused. It waits for them until ctx ends, then revokes the
// leases, which deletes whatever is left. The caller then shuts the HTTP
// server down.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.stop(errServerShutdown)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("holds still ending at the shutdown deadline: %w", ctx.Err())
	}
	err = errors.Join(err, s.sessions.close())
	s.requests.wait()
	return err
}

// holdIDLen is the length of a hold_id: 128 random bits in hex.
const holdIDLen = 32

func newHoldID() string {
	var b [holdIDLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// holdTable is the live holds by hold_id, for Heartbeat and Release.
type holdTable struct {
	mu sync.Mutex
	m  map[string]*hold
}

func (t *holdTable) add(h *hold) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[h.id] = h
}

func (t *holdTable) get(id string) *hold {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

func (t *holdTable) remove(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, id)
}
