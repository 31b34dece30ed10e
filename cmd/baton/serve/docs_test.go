package serve_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// walkthrough is the shell block of docs/serve.md after this marker.
const walkthroughMarker = "<!-- test: curl walkthrough -->"

func walkthrough(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), walkthroughMarker+"\n```sh\n")
	if !ok {
		t.Fatalf("docs/serve.md has no %q followed by a sh block", walkthroughMarker)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatal("the walkthrough block does not end")
	}
	return block
}

// TestDocsCurlWalkthrough runs docs/serve.md's curl walkthrough against a
// server: held, a heartbeat's validity, Inspect, Release, released.
func TestDocsCurlWalkthrough(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (.ci/run installs it)")
	}
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", walkthrough(t))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "S="+e.url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walkthrough: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	for _, want := range []string{`"validity":`, `"name":"invoice-42"`, `"held":`, `"holdId":`, `"released":{}`} {
		if !strings.Contains(strings.ReplaceAll(string(out), `": `, `":`), want) {
			t.Errorf("walkthrough output lacks %s:\n%s", want, out)
		}
	}
	if k := e.lockKeys(t); len(k) != 0 {
		t.Fatalf("keys left after the walkthrough: %v", k)
	}
}
