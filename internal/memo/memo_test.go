package memo

import (
	"errors"
	"testing"
)

func TestCachedBuildsOncePerKeyAndNotAfterAnError(t *testing.T) {
	var m Memo
	builds := 0
	build := func(v any, err error) func() (any, error) {
		return func() (any, error) { builds++; return v, err }
	}
	if _, err := m.Cached("a", build(nil, errors.New("no"))); err == nil {
		t.Fatal("the error was not returned")
	}
	for range 3 {
		if v, err := m.Cached("a", build(1, nil)); err != nil || v != 1 {
			t.Fatalf("got %v, %v", v, err)
		}
	}
	if v, _ := m.Cached("b", build(2, nil)); v != 2 {
		t.Fatalf("b: %v", v)
	}
	if builds != 3 {
		t.Fatalf("%d builds, want 3 (the failed one, a, b)", builds)
	}
}
