package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/internal/keys"
)

// Router routes namespaces to the etcd clusters of a map. It opens one
// connection per cluster, the first time one of the cluster's namespaces
// is asked for, and shares it among all callers until Close. It is safe
// for concurrent use.
type Router struct {
	m        Map
	s        settings
	byNS     map[string]int // namespace → index in m.Clusters
	byName   map[string]int // cluster name → index
	dflt     int            // index of the default cluster, -1 when none
	ctx      context.Context
	cancel   context.CancelFunc
	mu       sync.Mutex
	conns    []conn
	closed   bool
	inflight sync.WaitGroup
	hookDial func(cluster string) // tests: runs as an opening starts
}

type conn struct {
	cli     *clientv3.Client
	dialing chan struct{} // closed when the current attempt ends
}

// New validates m and returns a Router over it. No connection is opened
// until Client or ClusterClient asks for one.
func New(m Map, opts ...Option) (*Router, error) {
	s, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	r := &Router{s: s, byNS: map[string]int{}, byName: map[string]int{}, dflt: -1}
	r.m.Default = m.Default
	for i, c := range m.Clusters {
		r.m.Clusters = append(r.m.Clusters, c.clone())
		r.byName[c.Name] = i
		for _, ns := range c.Namespaces {
			r.byNS[ns] = i
		}
	}
	if m.Default != "" {
		r.dflt = r.byName[m.Default]
	}
	r.conns = make([]conn, len(m.Clusters))
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// Parse reads a cluster map (see Map) and returns a Router over it. Every
// problem of the map is reported at once (see ParseMap).
func Parse(data []byte, opts ...Option) (*Router, error) {
	m, err := ParseMap(data)
	if err != nil {
		return nil, err
	}
	return New(m, opts...)
}

// Load reads the cluster map file at path and returns a Router over it.
// Relative file names in the map are taken relative to the file's
// directory, and every file the map names must be readable; all problems
// are reported at once, prefixed with path.
func Load(path string, opts ...Option) (*Router, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("router: read cluster map: %w", err)
	}
	m, err := ParseMap(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.resolve(filepath.Dir(path))
	if err := errors.Join(m.checkFiles()...); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return New(m, opts...)
}

// Map returns a copy of the map the Router serves.
func (r *Router) Map() Map {
	out := Map{Default: r.m.Default}
	for _, c := range r.m.Clusters {
		out.Clusters = append(out.Clusters, c.clone())
	}
	return out
}

// Clusters returns the clusters of the map, in the map's order.
func (r *Router) Clusters() []Cluster { return r.Map().Clusters }

// Namespaces returns the namespaces the map lists, sorted. A default
// cluster also serves any other namespace.
func (r *Router) Namespaces() []string {
	out := make([]string, 0, len(r.byNS))
	for ns := range r.byNS {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// Default returns the name of the default cluster, empty when none.
func (r *Router) Default() string { return r.m.Default }

// Cluster returns the cluster that serves namespace ns, without
// connecting. It fails with an error wrapping ErrUnserved when no cluster
// lists ns and there is no default, or wrapping ErrInvalidNamespace for a
// name that cannot be a namespace.
func (r *Router) Cluster(ns string) (Cluster, error) {
	i, err := r.route(ns)
	if err != nil {
		return Cluster{}, err
	}
	return r.m.Clusters[i].clone(), nil
}

// ErrInvalidNamespace is wrapped by the error of Cluster and Client for a
// string that cannot be a namespace.
var ErrInvalidNamespace = errors.New("router: invalid namespace")

func (r *Router) route(ns string) (int, error) {
	if err := keys.ValidateNamespace(ns); err != nil {
		return 0, fmt.Errorf("%w: %s", ErrInvalidNamespace, strings.TrimPrefix(err.Error(), keys.ErrInvalid.Error()+": "))
	}
	if i, ok := r.byNS[ns]; ok {
		return i, nil
	}
	if r.dflt >= 0 {
		return r.dflt, nil
	}
	names := make([]string, len(r.m.Clusters))
	for i, c := range r.m.Clusters {
		names[i] = c.Name
	}
	return 0, fmt.Errorf("%w: namespace %q is listed by none of the clusters %q and the map has no default", ErrUnserved, ns, names)
}

// Client returns the client of the cluster that serves namespace ns,
// opening the cluster's connection on first use. The client is shared:
// do not close it, Close closes it. Hand it to mutex.New or election.New
// with the same namespace:
//
//	cli, err := r.Client(ctx, "payments")
//	m, err := mutex.New(cli, "settle", mutex.WithNamespace("payments"))
//
// It fails with an error wrapping ErrUnserved or ErrInvalidNamespace as
// Cluster does, with ErrClosed after Close, with ctx's error when ctx ends
// while another caller opens the same connection, and with the dial's
// error (bounded by WithDialTimeout) when the connection cannot be opened;
// a failed opening is tried again by the next call.
//
// A cluster that pins its identity (Cluster.ID) is asked who it is when
// its connection opens, within WithDialTimeout, and the client is refused
// with an error wrapping ErrIdentity when another etcd cluster answers, or
// one below the pinned revision; every later response is checked too (see
// Cluster.DialOptions), so no lock or term is ever handed out from the
// wrong cluster. Otherwise, like clientv3.New, a cluster without
// credentials is not contacted before the first request, so an unreachable
// cluster shows in the requests, bounded by their contexts, and never in
// the other clusters' clients; its client then holds to the first etcd
// cluster it meets.
func (r *Router) Client(ctx context.Context, ns string) (*clientv3.Client, error) {
	i, err := r.route(ns)
	if err != nil {
		return nil, err
	}
	return r.open(ctx, i)
}

// ClusterClient returns the client of the named cluster, as Client does;
// it is for tools that visit every cluster (listing, applying a policy).
// It fails with an error wrapping ErrUnknownCluster for a name the map
// does not have.
func (r *Router) ClusterClient(ctx context.Context, cluster string) (*clientv3.Client, error) {
	i, ok := r.byName[cluster]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownCluster, cluster)
	}
	return r.open(ctx, i)
}

func (r *Router) open(ctx context.Context, i int) (*clientv3.Client, error) {
	c := &r.conns[i]
	for {
		r.mu.Lock()
		switch {
		case r.closed:
			r.mu.Unlock()
			return nil, ErrClosed
		case c.cli != nil:
			cli := c.cli
			r.mu.Unlock()
			return cli, nil
		case c.dialing != nil:
			wait := c.dialing
			r.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		c.dialing = make(chan struct{})
		r.inflight.Add(1)
		r.mu.Unlock()

		cli, err := r.dial(ctx, r.m.Clusters[i])

		r.mu.Lock()
		close(c.dialing)
		c.dialing = nil
		closed := r.closed
		if err == nil && !closed {
			c.cli = cli
		}
		r.mu.Unlock()
		r.inflight.Done()
		if err != nil {
			return nil, fmt.Errorf("router: cluster %q: %w", r.m.Clusters[i].Name, err)
		}
		if closed {
			_ = cli.Close()
			return nil, ErrClosed
		}
		return cli, nil
	}
}

// dial opens one cluster's client, reading its TLS files and password now
// so that rotated files are picked up by the next opening.
func (r *Router) dial(ctx context.Context, c Cluster) (*clientv3.Client, error) {
	if r.hookDial != nil {
		r.hookDial(c.Name)
	}
	cfg := clientv3.Config{
		Endpoints:   c.ClientEndpoints(),
		DialTimeout: r.s.dialTimeout,
		Logger:      r.s.logger,
		Context:     r.ctx,
		DialOptions: c.DialOptions(),
	}
	tlsCfg, err := clientTLS(c)
	if err != nil {
		return nil, err
	}
	cfg.TLS = tlsCfg
	if cr := c.Credentials; cr != nil {
		cfg.Username = cr.User
		switch {
		case cr.PasswordEnv != "":
			cfg.Password = r.s.getenv(cr.PasswordEnv)
			if cfg.Password == "" {
				return nil, fmt.Errorf("credentials: environment variable %s is empty", cr.PasswordEnv)
			}
		default:
			b, err := os.ReadFile(cr.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("credentials: %w", err)
			}
			cfg.Password = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, err
	}
	vctx, cancel := context.WithTimeout(ctx, r.s.dialTimeout)
	defer cancel()
	stop := context.AfterFunc(r.ctx, cancel) // Close does not wait a whole timeout
	defer stop()
	if err := verifyPinned(vctx, cli, c); err != nil {
		_ = cli.Close()
		return nil, err
	}
	return cli, nil
}

// clientTLS is nil for a cluster without TLS files and only plain
// endpoints.
func clientTLS(c Cluster) (*tls.Config, error) {
	if c.TLS == nil {
		for _, ep := range c.Endpoints {
			if strings.HasPrefix(ep, "https://") {
				return &tls.Config{MinVersion: tls.VersionTLS12}, nil
			}
		}
		return nil, nil
	}
	info := transport.TLSInfo{CertFile: c.TLS.Cert, KeyFile: c.TLS.Key, TrustedCAFile: c.TLS.CA}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	return cfg, nil
}

// Close closes every connection the Router opened and makes later calls
// fail with ErrClosed. It waits for openings in progress. Idempotent.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	var clis []*clientv3.Client
	for i := range r.conns {
		if c := r.conns[i].cli; c != nil {
			clis = append(clis, c)
			r.conns[i].cli = nil
		}
	}
	r.mu.Unlock()
	r.cancel()
	r.inflight.Wait()
	var errs []error
	for _, c := range clis {
		if err := c.Close(); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
