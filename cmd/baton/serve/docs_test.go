package serve_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The walkthroughs are the shell blocks of docs/serve.md after these
// markers.
const (
	walkthroughMarker        = "<!-- test: curl walkthrough -->"
	grpcurlWalkthroughMarker = "<!-- test: grpcurl walkthrough -->"
)

func walkthrough(t *testing.T) string {
	t.Helper()
	return walkthroughAt(t, walkthroughMarker)
}

func walkthroughAt(t *testing.T, marker string) string {
	t.Helper()
	doc, err := os.ReadFile("../../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), marker+"\n```sh\n")
	if !ok {
		t.Fatalf("docs/serve.md has no %q followed by a sh block", marker)
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

// grpcurlVersion is the grpcurl that .ci/run installs.
const grpcurlVersion = "v1.9.4"

// TestDocsGrpcurlWalkthrough runs docs/serve.md's grpcurl walkthrough
// against a server, with the .proto and no server reflection: held, a
// heartbeat's validity, Inspect, Release, released. Without grpcurl it
// skips, unless BATON_GRPCURL_REQUIRED is set (.ci/run sets it).
func TestDocsGrpcurlWalkthrough(t *testing.T) {
	if _, err := exec.LookPath("grpcurl"); err != nil {
		why := "grpcurl is not installed (go install github.com/fullstorydev/grpcurl/cmd/grpcurl@" + grpcurlVersion + ")"
		if os.Getenv("BATON_GRPCURL_REQUIRED") != "" {
			t.Fatal(why + ", and BATON_GRPCURL_REQUIRED is set")
		}
		t.Skip(why)
	}
	proto, err := filepath.Abs("../../../proto")
	if err != nil {
		t.Fatal(err)
	}
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", walkthroughAt(t, grpcurlWalkthroughMarker))
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "A="+strings.TrimPrefix(e.url, "http://"), "P="+proto)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walkthrough: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	flat := strings.Join(strings.Fields(string(out)), "")
	for _, want := range []string{`"validity":"`, `"name":"invoice-42"`, `"held":{"holdId":"`, `"released":{}`} {
		if !strings.Contains(flat, want) {
			t.Errorf("walkthrough output lacks %s:\n%s", want, out)
		}
	}
	if k := e.lockKeys(t); len(k) != 0 {
		t.Fatalf("keys left after the walkthrough: %v", k)
	}
}
