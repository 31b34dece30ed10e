package serve

import (
	"crypto/tls"
	"net/http"
	"time"
)

// Hooks are the pause points of a Server, for tests.
type Hooks struct {
	BeforeUnlock   func(id string, cause error)
	ReleaseWaiting func(id string)
	BeforeFollow   func(id string)
	RequestsSeen   func(ns string, rev int64)
	LateSend       func()
	DrainTimedOut  func(shard int)
}

// WithHooks sets cfg's pause points.
func WithHooks(cfg *Config, h Hooks) {
	cfg.hooks = &hooks{beforeUnlock: h.BeforeUnlock, releaseWaiting: h.ReleaseWaiting, beforeFollow: h.BeforeFollow, requestsSeen: h.RequestsSeen,
		lateSend: h.LateSend, drainTimedOut: h.DrainTimedOut}
}

// HTTPServer is the http.Server `baton serve` runs on one listener, with
// the default timeouts.
func HTTPServer(h http.Handler, useTLS bool, cfg *tls.Config) *http.Server {
	return httpServer(h, useTLS, cfg, timeouts{readHeader: DefaultReadHeaderTimeout, read: DefaultReadTimeout, idle: DefaultIdleTimeout})
}

// HTTPServerWithTimeouts is HTTPServer over plaintext with the
// --read-header-timeout and --idle-timeout given.
func HTTPServerWithTimeouts(h http.Handler, readHeader, idle time.Duration) *http.Server {
	return httpServer(h, false, nil, timeouts{readHeader: readHeader, idle: idle})
}

// SendTimeout is how long a stream's message may wait for its caller.
var SendTimeout = sendTimeout

// Budget is how long the server keeps a hold after a heartbeat.
var Budget = budgetOf
