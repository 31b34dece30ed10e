package compat

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Versions are the etcd minor versions the suite runs against, oldest
// first.
var Versions = []string{"3.4", "3.5", "3.6"}

// Environment variables read by the suite.
const (
	DirEnv      = "BATON_COMPAT_DIR"
	RequireEnv  = "BATON_COMPAT_REQUIRE"
	VersionsEnv = "BATON_COMPAT_VERSIONS"
)

// Binaries are one version's etcd and etcdctl.
type Binaries struct {
	// Minor is "3.4", "3.5" or "3.6".
	Minor string
	// Etcd and Etcdctl are paths of executables.
	Etcd, Etcdctl string
}

// AtLeast reports whether b's minor version is minor or later.
func (b Binaries) AtLeast(minor string) bool { return compareMinor(b.Minor, minor) >= 0 }

func compareMinor(a, b string) int {
	var amaj, amin, bmaj, bmin int
	_, _ = fmt.Sscanf(a, "%d.%d", &amaj, &amin)
	_, _ = fmt.Sscanf(b, "%d.%d", &bmaj, &bmin)
	if amaj != bmaj {
		return amaj - bmaj
	}
	return amin - bmin
}

// Find locates the binaries of minor in $BATON_COMPAT_DIR/etcd-<minor>/.
func Find(minor string) (Binaries, error) {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		return Binaries{}, fmt.Errorf("%s is not set: run `make test-compat`, which fetches the binaries with .ci/etcd-binaries.sh", DirEnv)
	}
	b := Binaries{Minor: minor, Etcd: filepath.Join(dir, "etcd-"+minor, "etcd"), Etcdctl: filepath.Join(dir, "etcd-"+minor, "etcdctl")}
	for _, p := range []string{b.Etcd, b.Etcdctl} {
		st, err := os.Stat(p)
		if err != nil {
			return Binaries{}, fmt.Errorf("etcd %s: %w (run .ci/etcd-binaries.sh)", minor, err)
		}
		if st.Mode()&0o111 == 0 {
			return Binaries{}, fmt.Errorf("etcd %s: %s is not executable", minor, p)
		}
	}
	return b, nil
}

// ForEachVersion runs fn as a subtest per version, named by the minor
// version. A version whose binaries are missing is skipped, or fails the
// test when BATON_COMPAT_REQUIRE=1.
func ForEachVersion(t *testing.T, fn func(t *testing.T, b Binaries)) {
	t.Helper()
	only := os.Getenv(VersionsEnv)
	for _, minor := range Versions {
		if only != "" && !contains(strings.Split(only, ","), minor) {
			continue
		}
		t.Run(minor, func(t *testing.T) {
			b, err := Find(minor)
			if err != nil {
				if os.Getenv(RequireEnv) == "1" {
					t.Fatalf("binaries required (%s=1): %v", RequireEnv, err)
				}
				t.Skipf("skipped: no etcd %s binaries: %v", minor, err)
			}
			fn(t, b)
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}
