// Package etcdtest starts a real embedded etcd member on 127.0.0.1 for
// tests and examples: a temp data directory, free loopback ports, fsync
// on, silent logs, ready in about a second. It imports testing and is for
// tests only; baton's commands start their etcd through a production
// package.
//
//	srv := etcdtest.Start(t)          // stopped by t.Cleanup
//	cli := srv.Client(t)              // closed by t.Cleanup
package etcdtest

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/batonhq/baton/internal/embedetcd"
)

// Config configures a member. The zero Config is a fresh single member in
// a new temp directory on free loopback ports.
type Config = embedetcd.Config

// minBcryptCost is golang.org/x/crypto/bcrypt's MinCost.
const minBcryptCost = 4

// Server is a running embedded etcd member.
type Server struct{ *embedetcd.Server }

// Start starts a member for a test and stops it on t.Cleanup.
func Start(tb testing.TB, cfgs ...Config) *Server {
	tb.Helper()
	var cfg Config
	if len(cfgs) > 0 {
		cfg = cfgs[0]
	}
	s, err := New(cfg)
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// New starts a member and waits until it serves. Its passwords are hashed
// at bcrypt's least cost, so that a test's authentications (one bcrypt on
// the server each) do not outlast a dial timeout on a loaded machine
// running the race detector; a Tune of the test's own may set another.
func New(cfg Config) (*Server, error) {
	tune := cfg.Tune
	cfg.Tune = func(ec *embed.Config) {
		ec.BcryptCost = minBcryptCost
		if tune != nil {
			tune(ec)
		}
	}
	s, err := embedetcd.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Server{s}, nil
}

// Client returns a client of the member, closed on t.Cleanup.
func (s *Server) Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	cli, err := s.NewClient(s.Endpoints()...)
	if err != nil {
		tb.Fatalf("etcdtest: client: %v", err)
	}
	tb.Cleanup(func() { _ = cli.Close() })
	return cli
}
