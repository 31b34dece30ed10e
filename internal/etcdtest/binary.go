package etcdtest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// serverPkg is etcd's main package; internal/embedetcd's module requires
// it, so building there takes the version baton pins.
const serverPkg = "go.etcd.io/etcd/server/v3"

var binary struct {
	once sync.Once
	path string
	err  error
}

// Binary returns the path of the etcd server binary the tests run:
// $BATON_ETCD_BIN if set, else the pinned release built once into the
// user's cache ($BATON_ETCD_CACHE, default <user cache>/baton/etcd) under a
// file lock, so that test binaries of several packages started at once
// build it once.
func Binary() (string, error) {
	binary.once.Do(func() { binary.path, binary.err = build() })
	return binary.path, binary.err
}

func build() (string, error) {
	if p := os.Getenv("BATON_ETCD_BIN"); p != "" {
		return p, nil
	}
	modDir, version, err := serverModule()
	if err != nil {
		return "", err
	}
	cache := os.Getenv("BATON_ETCD_CACHE")
	if cache == "" {
		uc, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory: %w", err)
		}
		cache = filepath.Join(uc, "baton", "etcd")
	}
	// Keyed by the server version and the module's go.sum: the same etcd
	// built with other dependencies is another binary.
	sum, err := os.ReadFile(filepath.Join(modDir, "go.sum"))
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, fmt.Sprintf("server-%s-%x", version, sha256.Sum256(sum))[:len("server-")+len(version)+13])
	bin := filepath.Join(dir, "etcd")
	if fi, err := os.Stat(bin); err == nil && fi.Mode()&0o111 != 0 {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := lockFile(lock); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer unlockFile(lock)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built by another test binary while this one waited
	}
	tmp := fmt.Sprintf("%s.%d.tmp", bin, os.Getpid())
	cmd := exec.Command("go", "build", "-o", tmp, serverPkg)
	cmd.Dir = modDir
	// The test's own flags (-race, -cover) are not the server's.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s@%s in %s: %v\n%s", serverPkg, version, modDir, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// errNoModule is returned where the server's module is not beside the
// library (the library's tests run from the module cache, as `go test all`
// does in an application): Main then skips the package's tests.
var errNoModule = errors.New("the etcd server module is not found (internal/embedetcd); set BATON_ETCD_BIN to an etcd binary")

var serverRequire = regexp.MustCompile(`(?m)^\s*(?:require\s+)?go\.etcd\.io/etcd/server/v3\s+(v\S+)`)

// serverModule finds internal/embedetcd's module from the root module of
// the working directory (a test runs in its package's directory) and the
// server version its go.mod requires.
func serverModule() (dir, version string, err error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", "", errNoModule
	}
	dir = filepath.Join(filepath.Dir(gomod), "internal", "embedetcd")
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return "", "", fmt.Errorf("%w (%v)", errNoModule, err)
	}
	m := serverRequire.FindSubmatch(b)
	if m == nil {
		return "", "", fmt.Errorf("%s/go.mod requires no %s", dir, serverPkg)
	}
	return dir, string(m[1]), nil
}
