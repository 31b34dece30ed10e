package queue

// Queued is how many enqueues wait in b for a group.
func Queued(b *Batcher) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queued)
}

// MaxInflight is maxInflight.
const MaxInflight = maxInflight
