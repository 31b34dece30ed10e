package version

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestSkewRefusesAnotherReleasesLibrary: a CLI of one release linked with
// another release's library is refused; development builds and
// pseudo-versions are not judged.
func TestSkewRefusesAnotherReleasesLibrary(t *testing.T) {
	dep := func(v string, replaced bool) []*debug.Module {
		m := &debug.Module{Path: libraryPath, Version: v}
		if replaced {
			m.Replace = &debug.Module{Path: "../..", Version: ""}
		}
		return []*debug.Module{{Path: "github.com/spf13/cobra", Version: "v1.10.2"}, m}
	}
	for _, tt := range []struct {
		name   string
		cli    string
		deps   []*debug.Module
		refuse bool
	}{
		{"one release", "v0.1.0", dep("v0.1.0", false), false},
		{"newer library", "v0.1.0", dep("v0.2.0", false), true},
		{"older library", "v0.2.1", dep("v0.2.0", false), true},
		{"checkout", "(devel)", dep("v0.0.0-00010101000000-000000000000", true), false},
		{"replaced library", "v0.1.0", dep("v0.2.0", true), false},
		{"pseudo-version library", "v0.1.0", dep("v0.1.1-0.20261207010101-abcdefabcdef", false), false},
		{"pre-release of the CLI", "v0.1.0-prep.abc", dep("v0.1.0-prep.abc", false), false},
		{"no library", "v0.1.0", nil, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := skew(&debug.BuildInfo{Main: debug.Module{Path: libraryPath + "/cmd/baton", Version: tt.cli}, Deps: tt.deps})
			if (err != nil) != tt.refuse {
				t.Fatalf("skew = %v, want refused %v", err, tt.refuse)
			}
			if err != nil && !strings.Contains(err.Error(), "go install "+libraryPath+"/cmd/baton@"+tt.cli) {
				t.Errorf("the refusal does not say how to install: %v", err)
			}
		})
	}
}
