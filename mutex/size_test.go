package mutex_test

import (
	"testing"
	"unsafe"

	"github.com/batonhq/baton/mutex"
)

// A held lock allocates its Lock (and, one name per Mutex, the Mutex)
// beside the core's structs (internal/core's TestHoldFitsItsSizeClass):
// both stay in the allocator's 32-byte size class.
func TestLockAndMutexFitTheirSizeClass(t *testing.T) {
	for name, size := range map[string]uintptr{"Lock": unsafe.Sizeof(mutex.Lock{}), "Mutex": unsafe.Sizeof(mutex.Mutex{})} {
		if size > 32 {
			t.Errorf("mutex.%s is %d bytes, past its size class 32", name, size)
		}
	}
}
