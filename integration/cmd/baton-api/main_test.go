package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAddThenRemove walks the policy's two paths on a copy of apicheck's
// fixture module: an addition recorded by next (make api), and a removal
// accepted only once except.txt and CHANGELOG.md name a minor release.
func TestAddThenRemove(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("../../apicheck/testdata/fixture")); err != nil {
		t.Fatal(err)
	}
	baton := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(append([]string{"-root", dir}, args...), &out, &errOut); code != wantCode {
			t.Fatalf("baton-api %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, wantCode, &out, &errOut)
		}
		return out.String(), errOut.String()
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	api, _ := baton(0, "list")
	const added = "pkg example.com/fixture/shapes, func Old()\n"
	const gone = "pkg example.com/fixture/shapes, func Gone()\n"
	if !strings.Contains(api, added) {
		t.Fatalf("list has no %q:\n%s", added, api)
	}
	// v0.1.0 recorded Gone, which the source no longer has, and not Old,
	// which it has.
	write("api/v0.1.0.txt", strings.Replace(api, added, "", 1)+gone)
	write("api/next.txt", "")

	_, errOut := baton(1, "check")
	for _, want := range []string{"not recorded: " + strings.TrimSpace(added), "run make api", "removed or changed: " + strings.TrimSpace(gone), `under "# v0.2.0"`} {
		if !strings.Contains(errOut, want) {
			t.Errorf("check does not say %q:\n%s", want, errOut)
		}
	}

	out, errOut := baton(1, "next")
	if !strings.Contains(out, "api/next.txt: 1 features") || strings.Contains(errOut, "not recorded") || !strings.Contains(errOut, "removed or changed") {
		t.Errorf("next: want Old recorded and Gone still refused:\nstdout:\n%s\nstderr:\n%s", out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "api/next.txt")); string(b) != added {
		t.Errorf("api/next.txt = %q, want %q", b, added)
	}

	// A patch release may not remove it; a minor one may.
	write("api/except.txt", "# v0.1.1: Gone was never used\n"+gone)
	write("CHANGELOG.md", "# Changelog\n\n## [Unreleased] — next: v0.1.1\n")
	_, errOut = baton(1, "check")
	if !strings.Contains(errOut, "before v1 only a minor release (v0.2.0)") {
		t.Errorf("check with a patch announced:\n%s", errOut)
	}
	write("api/except.txt", "# v0.2.0: Gone was never used\n"+gone)
	write("CHANGELOG.md", "# Changelog\n\n## [Unreleased] — next: v0.2.0\n")
	baton(0, "check")
}

func TestUsage(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "usage: baton-api") {
		t.Errorf("run(frobnicate) = %d, stderr %q; want 2 and the usage", code, errOut.String())
	}
}
