package metrics

import (
	"fmt"

	"github.com/batonhq/baton/internal/planted"
)

// The limit on the default label values a Registerer carries: the name
// label of the primitives (their name, or "semaphore:", "rwmutex:" or
// "shard:" and their name) and the resource label of fencing rejections,
// each counted apart. Package session documents it (WithMetricLabelLimit).
const (
	// Other is the label value shared by every primitive (and fencing
	// resource) whose default value the limit refused.
	Other             = "(other)"
	DefaultLabelLimit = 100
	MaxLabelLimit     = 10_000
)

// CheckLabelLimit validates a WithMetricLabelLimit value.
func CheckLabelLimit(n int) error {
	if n < 1 || n > MaxLabelLimit {
		return fmt.Errorf("WithMetricLabelLimit(%d): must be at least 1 and at most %d", n, MaxLabelLimit)
	}
	return nil
}

// What the collapsed counter's label says was collapsed.
const (
	collapsedName     = "name"
	collapsedResource = "resource"
)

// Label returns the name label of a primitive of namespace ns whose
// default label is def: def if the Registerer already gave it its place,
// or has given fewer than limit places, else Other, counted in
// baton_metric_labels_collapsed_total. A place, once given, is kept for
// the Registerer's life, so the values it ever carries stay bounded
// (series of an unused value are still deleted, by Use). first reports
// the Registerer's first collapse, for the caller to log. A nil m
// returns def.
func (m *Metrics) Label(ns, def string, limit int) (label string, first bool) {
	if m == nil || def == Other {
		return def, false
	}
	k := [2]string{ns, def}
	u := m.users
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.names[k]; ok {
		return def, false
	}
	if len(u.names) < limit {
		u.names[k] = struct{}{}
		return def, false
	}
	if !planted.On("n") {
		m.Collapsed.WithLabelValues(collapsedName).Inc()
	}
	first = !u.warned
	u.warned = true
	return Other, first
}

// resource returns the resource label of a fencing rejection, as Label
// does for a primitive's name.
func (m *Metrics) resource(r string, limit int) string {
	if r == Other {
		return r
	}
	u := m.users
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.resources[r]; ok {
		return r
	}
	if len(u.resources) < limit {
		u.resources[r] = struct{}{}
		return r
	}
	m.Collapsed.WithLabelValues(collapsedResource).Inc()
	return Other
}
