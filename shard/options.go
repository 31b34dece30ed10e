package shard

import (
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/batonhq/baton/internal/config"
	"github.com/batonhq/baton/session"
)

// Option configures a Group. New validates all options together and
// rejects bad values with an error wrapping ErrInvalid that names the
// option and its bound. The options of package session, and a
// *session.Session itself, are accepted too.
type Option = config.Option

// Bounds of WithTTL and WithMaxTTL, as in package session.
const DefaultTTL, MinTTL, DefaultMaxTTL = session.DefaultTTL, session.MinTTL, session.DefaultMaxTTL

// DefaultDrainTimeout and MaxDrainTimeout bound WithDrainTimeout.
const (
	DefaultDrainTimeout = 10 * time.Second
	MaxDrainTimeout     = config.MaxDrainTimeout
)

// The options every primitive takes, one definition for all:
//
//   - WithTTL, WithMaxTTL, WithSafetyMargin, WithMaxHeld, WithLogger,
//     WithRegisterer and WithTracerProvider are package session's, which
//     documents them. The TTL bounds how long a crashed member's shards
//     stay without an owner. Each shard a member takes or waits for is one
//     key of the session: New refuses a WithMaxHeld below the shard count
//     (a member alone in the group owns every shard), naming both. On a
//     shared session whose other keys fill the cap, Run keeps retrying the
//     shards it cannot take, and says so at Warn once per stretch.
//   - WithNamespace sets the first segment of every key (default "baton").
//   - WithMetricLabel sets the value of the name label of the metrics
//     (default: "shard:" and the group).
//   - WithIdentity sets the value written to the member's key next to the
//     shard count (default "host:pid"), shown by Members' callers such as
//     the baton CLI. The member name itself is Run's.
var WithTTL, WithMaxTTL, WithSafetyMargin, WithMaxHeld, WithLogger, WithRegisterer, WithTracerProvider, WithNamespace, WithMetricLabel, WithIdentity = session.WithTTL, session.WithMaxTTL, session.WithSafetyMargin, session.WithMaxHeld, session.WithLogger, session.WithRegisterer, session.WithTracerProvider, config.Namespace, config.MetricLabel, config.Identity

// WithSession makes the Group use s (a *session.Session or an etcd
// *concurrency.Session) instead of creating its own lease, as
// mutex.WithSession: the member's key and every shard key it takes live on
// that lease. The caller keeps ownership: Close does not close s. One
// lease runs at most one member of a group.
func WithSession[S *session.Session | *concurrency.Session](s S) Option { return config.Session(s) }

// WithDrainTimeout(d) bounds how long a member waits, after ending a
// shard's Context, for its fn to return before it releases the shard anyway
// (default DefaultDrainTimeout; more than 0, at most MaxDrainTimeout). A
// moving shard's new owner waits that long at most for a fn that ignores
// its Context.
var WithDrainTimeout = config.DrainTimeout
