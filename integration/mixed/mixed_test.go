package mixed

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

func TestMain(m *testing.M) {
	code := m.Run()
	builds.cleanup()
	if code == 0 {
		if err := cluster.FindLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// oldBuild is the previous release's build from BATON_MIXED_OLD (made by
// .ci/mixed-base.sh): its baton, its worker, and BASE, the commit.
func oldBuild(t *testing.T) (Build, bool) {
	t.Helper()
	dir := os.Getenv("BATON_MIXED_OLD")
	if dir == "" {
		if os.Getenv("BATON_MIXED_REQUIRE") != "" {
			t.Fatal("BATON_MIXED_OLD is not set: run make test-mixed, which builds the previous release with .ci/mixed-base.sh")
		}
		t.Skip("BATON_MIXED_OLD is not set; make test-mixed builds the previous release and runs this test")
	}
	base, err := os.ReadFile(filepath.Join(dir, "BASE"))
	if err != nil {
		t.Fatalf("BATON_MIXED_OLD=%s: %v", dir, err)
	}
	b := Build{Label: "old", Commit: strings.TrimSpace(string(base)), Baton: filepath.Join(dir, "baton"), Worker: filepath.Join(dir, "worker")}
	for _, f := range []string{b.Baton, b.Worker} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("BATON_MIXED_OLD=%s: %v", dir, err)
		}
	}
	_, err = os.Stat(filepath.Join(dir, "noshard"))
	return b, err == nil
}

// builds are the current build's binaries, built once per set of tags.
var builds buildDir

type buildDir struct {
	mu  sync.Mutex
	dir string
	by  map[string]Build
}

func (b *buildDir) cleanup() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// newBuild builds this tree's baton and worker (with the worker built
// with tags, if any).
func newBuild(t *testing.T, tags string) Build {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if b, ok := builds.by[tags]; ok {
		return b
	}
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "baton-mixed-")
		if err != nil {
			t.Fatal(err)
		}
		builds.dir, builds.by = d, map[string]Build{}
	}
	commit := "this tree"
	if out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out)) + " (this tree)"
	}
	b := Build{Label: "new", Commit: commit, Baton: filepath.Join(builds.dir, "baton"), Worker: filepath.Join(builds.dir, "worker"+tags)}
	if tags != "" {
		b.Commit += " with -tags " + tags
	}
	if _, err := os.Stat(b.Baton); err != nil {
		if out, err := exec.Command("go", "build", "-o", b.Baton, "github.com/batonhq/baton/cmd/baton").CombinedOutput(); err != nil {
			t.Fatalf("go build cmd/baton: %v\n%s", err, out)
		}
	}
	args := []string{"build", "-o", b.Worker}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	if out, err := exec.Command("go", append(args, "./worker")...).CombinedOutput(); err != nil {
		t.Fatalf("go build ./worker: %v\n%s", err, out)
	}
	builds.by[tags] = b
	return b
}

// logWriter sends a run's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func envSeed(t *testing.T) uint64 {
	v := os.Getenv("BATON_MIXED_SEED")
	if v == "" {
		return 0
	}
	s, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("BATON_MIXED_SEED=%q: %v", v, err)
	}
	return s
}

// TestMixedVersions runs the previous release's build and this one side by
// side on the same names of one three-member cluster, with every fault
// kind, and judges the history: no violation, and every lane of both
// builds acquired.
func TestMixedVersions(t *testing.T) {
	old, noShard := oldBuild(t)
	cur := newBuild(t, "")
	c := cluster.Start(t, 3)
	cover := []string{"mutex", "set", "semaphore", "rwmutex.read", "rwmutex.write", "election", "preferred", "delay", "cli", "cli.set"}
	if !noShard {
		cover = append(cover, "shard")
	}
	cfg := Config{Cluster: c, Old: old, New: cur, Duration: envDuration(t, "BATON_MIXED_DURATION", 60*time.Second),
		Seed: envSeed(t), CLI: true, Cover: cover, Log: logWriter{t}, HistoryFile: os.Getenv("BATON_MIXED_HISTORY")}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	res.Print(&b, cfg)
	t.Log(b.String())
	if n := res.Violations(); n > 0 {
		t.Errorf("%d violations between %s and %s (seed %d: BATON_MIXED_SEED=%d replays the traffic and faults)", n, old.Commit, cur.Commit, res.Report.Seed, res.Report.Seed)
	}
}

// TestPlantedBugIsFound runs the same traffic with this build's worker
// writing unfenced (the mixed_planted tag) while its holders are frozen
// past their TTL: the checks must report it.
func TestPlantedBugIsFound(t *testing.T) {
	old, _ := oldBuild(t)
	planted := newBuild(t, "mixed_planted")
	c := cluster.Start(t, 3)
	cfg := Config{Cluster: c, Old: old, New: planted, Duration: envDuration(t, "BATON_MIXED_PLANTED_DURATION", 25*time.Second),
		Seed: envSeed(t), Procs: []string{"mutex,set"}, Faults: []string{FaultFreeze}, FaultBuild: planted.Label, Log: logWriter{t}}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	res.Print(&b, cfg)
	found := map[string]int{}
	for _, v := range res.Report.Violations {
		found[v.Check]++
	}
	if found["exclusion"]+found["frozen-fenced"]+found["register"]+found["fence"] == 0 {
		t.Fatalf("the planted bug (writes without fencing, holders frozen past their TTL) was not found: %v\n%s", found, b.String())
	}
	t.Logf("planted bug found: %v violations by check, the first %v into the run [%s]", found, res.Report.FirstFound().Round(time.Millisecond), firstCheck(res))
}

func firstCheck(res *Result) string {
	var at time.Duration
	check := ""
	for _, v := range res.Report.Violations {
		if v.At > 0 && (at == 0 || v.At < at) {
			at, check = v.At, v.Check
		}
	}
	return check
}

// TestLockDelayBindsTheContendersThatSetIt: on a name whose holders of both
// builds set a lock-delay and are sometimes lost without releasing, the
// delay binds every contender that sets one, of either build; a contender
// that sets none is not bound (docs/compatibility.md, "Lock-delay across
// builds"): the checks may report its acquisitions within a running delay,
// and nothing else. How many it made is a figure of the run.
func TestLockDelayBindsTheContendersThatSetIt(t *testing.T) {
	old, _ := oldBuild(t)
	cur := newBuild(t, "")
	c := cluster.Start(t, 3)
	cfg := Config{Cluster: c, Old: old, New: cur, Duration: envDuration(t, "BATON_MIXED_DELAY_DURATION", 15*time.Second),
		Seed: envSeed(t), Procs: []string{"delay"}, NewProcs: []string{"nodelay"}, Faults: []string{}, Cover: []string{"delay"}, Log: logWriter{t}}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	res.Print(&b, cfg)
	unbound := 0
	for _, v := range res.Report.Violations {
		if v.Check == "lock-delay" && strings.Contains(v.Msg, ".nodelay") {
			if strings.Contains(v.Msg, "acquired") {
				unbound++
			}
			continue
		}
		t.Errorf("[%s] %s", v.Check, v.Msg)
	}
	if len(res.Coverage) > 0 || res.Leftover != "" || res.Acquisitions[cur.Label]["nodelay"] == 0 {
		t.Errorf("coverage %v, leftover %q, acquisitions %v", res.Coverage, res.Leftover, res.Acquisitions)
	}
	if t.Failed() {
		t.Log(b.String())
	}
	t.Logf("lock-delay of 2 s on ld0: acquisitions with a delay old %d, new %d, none of them within a running delay; without one (new) %d, %d of them within a running delay",
		res.Acquisitions[old.Label]["delay"], res.Acquisitions[cur.Label]["delay"], res.Acquisitions[cur.Label]["nodelay"], unbound)
}
