package rbac

import (
	"context"
	"fmt"
	"time"
)

// ApplyOption changes what Apply does.
type ApplyOption interface{ apply(*applyConfig) }

type applyConfig struct {
	prune      bool
	dryRun     bool
	reqTimeout time.Duration
	progress   func(Change)
	// invalid is the first bad option value, reported by buildApply.
	invalid error
}

type applyOption func(*applyConfig)

func (o applyOption) apply(c *applyConfig) { o(c) }

// WithPrune makes Apply also revoke and delete baton's roles of every
// namespace the policy does not list, so the policy describes the whole
// cluster. Without it, unlisted namespaces are left alone. Roles not
// named "baton:…" are never touched either way.
func WithPrune() ApplyOption { return applyOption(func(c *applyConfig) { c.prune = true }) }

// WithDryRun makes Apply read etcd and return the changes it would make,
// making none.
func WithDryRun() ApplyOption { return applyOption(func(c *applyConfig) { c.dryRun = true }) }

// WithRequestTimeout bounds each request Apply and Show make to etcd by d,
// instead of only the whole call by its ctx: an Apply of thousands of
// changes can then take as long as it needs while a stuck request still
// fails within d. d must be positive.
func WithRequestTimeout(d time.Duration) ApplyOption {
	return applyOption(func(c *applyConfig) {
		if d <= 0 && c.invalid == nil {
			c.invalid = fmt.Errorf("%w: request timeout %v must be positive", ErrInvalid, d)
		}
		c.reqTimeout = d
	})
}

// WithProgress makes Apply call fn with each change right after etcd
// accepted it, from the calling goroutine, so that a long apply shows its
// progress. It is not called under WithDryRun.
func WithProgress(fn func(Change)) ApplyOption {
	return applyOption(func(c *applyConfig) { c.progress = fn })
}

func buildApply(opts []ApplyOption) (applyConfig, error) {
	var c applyConfig
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: apply option %d is nil", ErrInvalid, i)
		}
		o.apply(&c)
	}
	return c, c.invalid
}

// request bounds one request by the request timeout, if any.
func (c applyConfig) request(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.reqTimeout > 0 {
		return context.WithTimeout(ctx, c.reqTimeout)
	}
	return ctx, func() {}
}
