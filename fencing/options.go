package fencing

import (
	"fmt"
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/metrics"
)

// Option configures a guard. Options that a guard does not use are
// rejected by its constructor rather than ignored.
type Option interface{ apply(*guardConfig) }

type guardConfig struct {
	reg   prometheus.Registerer
	log   *zap.Logger
	tp    trace.TracerProvider
	tpSet bool

	namespace    string // EtcdGuard
	namespaceSet bool
	table        string // SQLGuard
	tableSet     bool
	labelLimit   int
}

type optionFunc func(*guardConfig)

func (f optionFunc) apply(c *guardConfig) { f(c) }

// WithRegisterer counts rejections in baton_fencing_rejections_total on reg.
func WithRegisterer(reg prometheus.Registerer) Option {
	return optionFunc(func(c *guardConfig) { c.reg = reg })
}

// WithMetricLabelLimit(n) bounds the values of the resource label of
// baton_fencing_rejections_total on the guard's Registerer: a rejection
// records under its resource if the Registerer already carries it or
// carries fewer than n resources, else under resource="(other)", counted
// in baton_metric_labels_collapsed_total{label="resource"}. A resource
// keeps its place for the Registerer's life. n is 1 to 10000, default 100,
// as session.WithMetricLabelLimit's for the primitives' name label
// (counted apart from it). Guard per-entity resources (a row per order)
// without fear for the series: the first n keep theirs.
func WithMetricLabelLimit(n int) Option {
	return optionFunc(func(c *guardConfig) { c.labelLimit = n })
}

// WithLogger logs every rejection at Warn level with the fields resource,
// token and highest; the default is silent.
func WithLogger(l *zap.Logger) Option { return optionFunc(func(c *guardConfig) { c.log = l }) }

// WithTracerProvider records a span for every check made inside a trace
// (docs/telemetry.md) through tp; the default is the global provider,
// which records nothing unless the application installs one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *guardConfig) { c.tp, c.tpSet = tp, true })
}

// WithNamespace sets the namespace under which an EtcdGuard keeps its
// high-water marks (default "baton"): 1 to 64 bytes of letters, digits,
// '.', '_' and '-', as for mutex and election, so one RBAC grant covers a
// team's locks and fences. Only NewEtcdGuard accepts it.
func WithNamespace(ns string) Option {
	return optionFunc(func(c *guardConfig) { c.namespace, c.namespaceSet = ns, true })
}

// DefaultTable is the table of a SQLGuard unless WithTable says otherwise.
const DefaultTable = "baton_fence"

// WithTable sets the table of a SQLGuard (default DefaultTable): an SQL
// identifier of 1 to 63 bytes (letters, digits, '_', not starting with a
// digit), optionally qualified by a schema as "schema.table". It is
// spliced into the SQL, hence the strict form. Only NewSQLGuard accepts it.
func WithTable(name string) Option {
	return optionFunc(func(c *guardConfig) { c.table, c.tableSet = name, true })
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// buildConfig applies opts over the defaults and validates them for the
// guard named by who; allow lists the guard-specific options it takes.
func buildConfig(who string, opts []Option, allowNamespace, allowTable bool) (guardConfig, error) {
	c := guardConfig{log: zap.NewNop(), namespace: keys.DefaultNamespace, table: DefaultTable, labelLimit: metrics.DefaultLabelLimit}
	for _, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: %s: nil option", ErrInvalid, who)
		}
		o.apply(&c)
	}
	if c.log == nil {
		return c, fmt.Errorf("%w: %s: WithLogger(nil): use zap.NewNop() for silence", ErrInvalid, who)
	}
	if c.tpSet && c.tp == nil {
		return c, fmt.Errorf("%w: %s: WithTracerProvider(nil): leave it out for the global provider", ErrInvalid, who)
	}
	if err := metrics.CheckLabelLimit(c.labelLimit); err != nil {
		return c, fmt.Errorf("%w: %s: %w", ErrInvalid, who, err)
	}
	if c.namespaceSet && !allowNamespace {
		return c, fmt.Errorf("%w: %s does not take WithNamespace", ErrInvalid, who)
	}
	if c.tableSet && !allowTable {
		return c, fmt.Errorf("%w: %s does not take WithTable", ErrInvalid, who)
	}
	if err := keys.ValidateNamespace(c.namespace); err != nil {
		return c, fmt.Errorf("%w: %s: WithNamespace: %w", ErrInvalid, who, err)
	}
	if !identRE.MatchString(c.table) {
		return c, fmt.Errorf("%w: %s: WithTable(%q): want an SQL identifier of 1 to 63 letters, digits or '_', optionally schema-qualified", ErrInvalid, who, c.table)
	}
	return c, nil
}
