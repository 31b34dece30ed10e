package queue

// Queued is how many enqueues wait in b for a group.
func Queued(b *Batcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queued)
}

// MaxInflight is maxInflight.
const MaxInflight = maxInflight

// Joined is how many Raise callers of key wait for the raise after the
// one in flight.
func Joined(f *Fence, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.raises[key]; r != nil && r.next != nil {
		return r.next.joined
	}
	return 0
}

// SetWoke sets f's hook called when a caller waiting for the next raise
// saw the one in flight return, before it looks which is next; before use.
func SetWoke(f *Fence, fn func()) { f.woke = fn }
