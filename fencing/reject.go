package fencing

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/batonhq/baton/internal/metrics"
)

// rejecter counts and logs rejections the same way for every guard.
type rejecter struct {
	m     *metrics.Metrics
	log   *zap.Logger
	limit int // of resource labels
}

func newRejecter(who string, c guardConfig) (rejecter, error) {
	m, err := metrics.New(c.reg)
	if err != nil {
		return rejecter{}, fmt.Errorf("%s: register metrics: %w", who, err)
	}
	return rejecter{m: m, log: c.log, limit: c.labelLimit}, nil
}

// stale records a rejection and returns its error.
func (r rejecter) stale(resource string, t, highest Token) error {
	r.m.Rejected(resource, r.limit)
	r.log.Warn("stale fencing token rejected", zap.String("resource", resource),
		zap.Int64("token", int64(t)), zap.Int64("highest", int64(highest)))
	return &StaleError{Resource: resource, Token: t, Highest: highest}
}

// malformed is the error for a token no holder can have.
func malformed(resource string, t Token) error {
	return fmt.Errorf("%w: token %d for resource %q", ErrMalformed, t, resource)
}
