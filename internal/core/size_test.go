package core

import (
	"testing"
	"unsafe"
)

// sizeClasses are the Go allocator's size classes up to 1 KiB
// (runtime/sizeclasses.go): an object takes the smallest that fits it.
var sizeClasses = []uintptr{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024}

// SizeClass is the size class an object of n bytes takes.
func SizeClass(n uintptr) uintptr {
	for _, c := range sizeClasses {
		if n <= c {
			return c
		}
	}
	return n
}

// Every held lock allocates these once (issue 47: a field added to a
// hold's struct took it to the next size class, and a held lock past
// 1 KiB). Each must stay within the size class it takes now; a field that
// must be added pays for itself elsewhere, and the class here moves with
// the figure of make bench's held workload.
func TestHoldFitsItsSizeClass(t *testing.T) {
	for _, c := range []struct {
		name  string
		size  uintptr
		class uintptr
	}{
		{"Hold", unsafe.Sizeof(Hold{}), 224},
		{"Owner", unsafe.Sizeof(Owner[*Hold]{}), 240},
		{"reservation", unsafe.Sizeof(reservation{}), 32},
	} {
		if got := SizeClass(c.size); got > c.class {
			t.Errorf("%s is %d bytes: size class %d, past its %d", c.name, c.size, got, c.class)
		} else {
			t.Logf("%s: %d bytes of its size class %d", c.name, c.size, c.class)
		}
	}
}
