// Package inflight is the calls in flight of one object that a Close
// ends: closing refuses new calls, cancels those in flight with its cause
// and waits for them.
package inflight

import (
	"context"
	"sync"
)

// Calls is a set of calls in flight. The zero value is ready to use.
type Calls struct {
	wg     sync.WaitGroup
	mu     sync.Mutex // guards what follows
	closed bool
	head   *call
}

type call struct {
	cancel     context.CancelCauseFunc
	prev, next *call
}

// Enter counts a call in flight whose ctx Close ends; exit ends the call.
// false (ctx ended with cause) once Close began.
func (c *Calls) Enter(ctx context.Context, cause error) (_ context.Context, exit func(), ok bool) {
	ctx, cancel := context.WithCancelCause(ctx)
	k := &call{cancel: cancel}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		cancel(cause)
		return ctx, nil, false
	}
	c.wg.Add(1)
	k.next = c.head
	if k.next != nil {
		k.next.prev = k
	}
	c.head = k
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		if k.prev != nil {
			k.prev.next = k.next
		} else if c.head == k {
			c.head = k.next
		}
		if k.next != nil {
			k.next.prev = k.prev
		}
		c.mu.Unlock()
		cancel(nil)
		c.wg.Done()
	}, true
}

// Closed reports whether Close began.
func (c *Calls) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close refuses new calls, ends those in flight with cause, runs hook (a
// test's pause point; nil: none) and waits for them.
func (c *Calls) Close(cause error, hook func()) {
	c.mu.Lock()
	c.closed = true
	for k := c.head; k != nil; k = k.next {
		k.cancel(cause)
	}
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	c.wg.Wait()
}
