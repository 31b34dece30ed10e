package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryCarriesNoTestHarness: the shipped binary must not link the
// testing package, goleak, any integration package or a test harness of
// internal/etcdtest or internal/embedetcd's subpackages (the embedded etcd
// of baton dev comes from internal/embedetcd, not the test harness).
func TestBinaryCarriesNoTestHarness(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		if p == "testing" || strings.HasPrefix(p, "testing/") || strings.HasPrefix(p, "go.uber.org/goleak") ||
			strings.HasPrefix(p, "github.com/batonhq/baton/integration") ||
			strings.HasPrefix(p, "github.com/batonhq/baton/internal/etcdtest") ||
			strings.HasPrefix(p, "github.com/batonhq/baton/internal/embedetcd/") {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Fatalf("the baton binary links test code: %s", strings.Join(bad, ", "))
	}
}
