package config

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batonhq/baton/internal/core"
)

// Every primitive opened on one session with the session's Registerer
// shares one set of metrics, built once; another session builds its own
// on the same Registerer, and finds the same collectors registered.
func TestMetricsAreBuiltOncePerSessionAndRegisterer(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := Config{Session: core.Config{Registerer: reg}}
	s1, s2 := core.NewSession(nil, c.Session), core.NewSession(nil, c.Session)
	a, err := c.Metrics(s1)
	if err != nil || a == nil {
		t.Fatalf("%v, %v", a, err)
	}
	if b, _ := c.Metrics(s1); b != a {
		t.Fatal("a second primitive on the session built its metrics again")
	}
	b, err := c.Metrics(s2)
	if err != nil || b == a || b.AcquireTotal != a.AcquireTotal {
		t.Fatalf("another session: %p (err %v), want its own metrics on the same collectors as %p", b, err, a)
	}
	if m, err := (Config{}).Metrics(s1); m != nil || err != nil {
		t.Fatalf("no Registerer: %v, %v", m, err)
	}
}
