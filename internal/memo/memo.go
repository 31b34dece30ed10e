// Package memo keeps values built once per owner: what every primitive
// opened on one session would otherwise build alike.
package memo

import "sync"

// Memo maps comparable keys to the values built for them; the zero value
// is ready.
type Memo struct {
	mu sync.Mutex
	m  map[any]any
}

// Cached returns the value built for key, building it on first use (and
// again after an error). build runs with the Memo locked.
func (c *Memo) Cached(key any, build func() (any, error)) (any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[key]; ok {
		return v, nil
	}
	v, err := build()
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = make(map[any]any)
	}
	c.m[key] = v
	return v, nil
}
