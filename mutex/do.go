package mutex

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/fencing"
)

// Do runs fn while holding the lock name, then releases it. fn's context
// ends when ctx ends or when the lock may be lost; fn should stop writing
// then. Do returns fn's error if it has one; otherwise an error wrapping
// ErrNotHeld (and the loss's cause) if the lock was lost while fn ran, so
// a caller never mistakes work done without the lock for work done under
// it. Do creates and closes its own Mutex (and lease, unless WithSession).
func Do(ctx context.Context, cli *clientv3.Client, name string, fn func(ctx context.Context, t fencing.Token) error, opts ...Option) (err error) {
	if fn == nil {
		return fmt.Errorf("%w: mutex.Do: fn must not be nil", ErrInvalid)
	}
	m, err := New(cli, name, opts...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.Close()) }()
	l, err := m.Lock(ctx)
	if err != nil {
		return err
	}
	work, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	ferr := fn(work, l.Token())
	stop()
	cancel(nil)
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	uerr := l.Unlock(uctx)
	ucancel()
	if ferr != nil {
		return ferr
	}
	return uerr
}
