// Package embedetcd starts a real embedded etcd member on 127.0.0.1 for
// baton dev, baton demo, the benchmarks and (through internal/embedetcd/etcdtest)
// the tests: a data directory (a temp one by default), free loopback
// ports, fsync on, silent logs, ready in about a second.
package embedetcd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/loopback"
)

// Config configures a member. The zero Config is a fresh single member in
// a new temp directory on free loopback ports.
type Config struct {
	// Dir is the data directory; empty means a new temp directory, removed
	// on Stop. A member started on an existing Dir keeps its data.
	Dir string
	// ClientAddr is host:port for clients; empty picks a free 127.0.0.1 port.
	ClientAddr string
	// PeerAddr is host:port for peers; empty picks a free 127.0.0.1 port.
	PeerAddr string
	// Name is the member name; default "default".
	Name string
	// TLS, when set, serves clients over TLS with this configuration.
	TLS *transport.TLSInfo
	// Logger receives etcd's logs; default silent.
	Logger *zap.Logger
	// Tune, when set, may adjust the embed configuration before start.
	Tune func(*embed.Config)
	// ReadyTimeout bounds the start; default 30 s.
	ReadyTimeout time.Duration
}

// Server is a running embedded etcd member.
type Server struct {
	etcd     *embed.Etcd
	dir      string
	tempDir  bool
	endpoint string
	cfg      Config
}

// New starts a member and waits until it serves.
func New(cfg Config) (*Server, error) {
	s := &Server{cfg: cfg, dir: cfg.Dir}
	if s.dir == "" {
		dir, err := os.MkdirTemp("", "baton-etcd-")
		if err != nil {
			return nil, err
		}
		s.dir, s.tempDir = dir, true
	}
	clientAddr, peerAddr := cfg.ClientAddr, cfg.PeerAddr
	var err error
	if clientAddr == "" {
		if clientAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	if peerAddr == "" {
		if peerAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	if ec.Name == "" {
		ec.Name = "default"
	}
	ec.Dir = s.dir
	scheme := "http"
	if cfg.TLS != nil {
		scheme = "https"
		ec.ClientTLSInfo = *cfg.TLS
	}
	curl := url.URL{Scheme: scheme, Host: clientAddr}
	purl := url.URL{Scheme: "http", Host: peerAddr}
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{curl}, []url.URL{curl}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{purl}, []url.URL{purl}
	ec.InitialCluster = ec.Name + "=" + purl.String()
	ec.TickMs, ec.ElectionMs = 10, 100
	logger := cfg.Logger
	if logger == nil {
		logger = zap.NewNop()
	}
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger)
	if cfg.Tune != nil {
		cfg.Tune(ec)
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		s.removeTemp()
		return nil, fmt.Errorf("start embedded etcd: %w", err)
	}
	timeout := cfg.ReadyTimeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		s.removeTemp()
		return nil, fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		s.removeTemp()
		return nil, errors.New("embedded etcd not ready in time")
	}
	s.etcd = e
	s.endpoint = curl.String()
	return s, nil
}

// Endpoint is the client URL, e.g. http://127.0.0.1:41231.
func (s *Server) Endpoint() string { return s.endpoint }

// Endpoints is the client URLs, for clientv3.Config.
func (s *Server) Endpoints() []string { return []string{s.endpoint} }

// Dir is the data directory.
func (s *Server) Dir() string { return s.dir }

// Etcd is the embedded member, for fault injection.
func (s *Server) Etcd() *embed.Etcd { return s.etcd }

// Stop stops the member and removes a temp data directory. Idempotent.
func (s *Server) Stop() {
	if s.etcd == nil {
		return
	}
	s.etcd.Close()
	<-s.etcd.Server.StopNotify()
	s.etcd = nil
	s.removeTemp()
}

func (s *Server) removeTemp() {
	if s.tempDir {
		_ = os.RemoveAll(s.dir)
	}
}

// NewClient returns a client of the given endpoints (the member's by
// default, or a proxy's), with a short dial timeout and silent logs.
func (s *Server) NewClient(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = s.Endpoints()
	}
	return Dial(endpoints, nil)
}

// Dial returns a client of endpoints, over TLS when tlsCfg is not nil,
// with a short dial timeout and silent logs: how a Server's NewClient and
// the test clusters' connect.
func Dial(endpoints []string, tlsCfg *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		TLS:         tlsCfg,
		Logger:      zap.NewNop(),
	})
}

// Compact compacts the member's history up to its current revision.
func (s *Server) Compact(ctx context.Context, cli *clientv3.Client) (int64, error) {
	resp, err := cli.Get(ctx, "compact-probe")
	if err != nil {
		return 0, err
	}
	rev := resp.Header.Revision
	_, err = cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
	return rev, err
}

// FreeAddr returns a 127.0.0.1 host:port that was free a moment ago
// (loopback.FreeAddr).
func FreeAddr() (string, error) { return loopback.FreeAddr() }
