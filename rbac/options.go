package rbac

import "fmt"

// ApplyOption changes what Apply does.
type ApplyOption interface{ apply(*applyConfig) }

type applyConfig struct {
	prune  bool
	dryRun bool
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

func buildApply(opts []ApplyOption) (applyConfig, error) {
	var c applyConfig
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("%w: apply option %d is nil", ErrInvalid, i)
		}
		o.apply(&c)
	}
	return c, nil
}
