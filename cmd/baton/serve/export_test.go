package serve

import (
	"crypto/tls"
	"net/http"
)

// Hooks are the pause points of a Server, for tests.
type Hooks struct {
	BeforeUnlock   func(id string, cause error)
	ReleaseWaiting func(id string)
}

// WithHooks sets cfg's pause points.
func WithHooks(cfg *Config, h Hooks) {
	cfg.hooks = &hooks{beforeUnlock: h.BeforeUnlock, releaseWaiting: h.ReleaseWaiting}
}

// HTTPServer is the http.Server `baton serve` runs on one listener.
func HTTPServer(h http.Handler, useTLS bool, cfg *tls.Config) *http.Server {
	return httpServer(h, useTLS, cfg)
}

// Budget is how long the server keeps a hold after a heartbeat.
var Budget = budgetOf
