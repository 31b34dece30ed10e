package robustness

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/integration/compat"
)

// compatTarget is a Target of real etcd server processes.
type compatTarget struct{ c *compat.Cluster }

func (t compatTarget) Endpoints() []string { return t.c.Endpoints() }
func (t compatTarget) Kill(i int) error    { t.c.Members()[i].Kill(); return nil }
func (t compatTarget) Running(i int) bool  { return t.c.Members()[i].Running() }

func (t compatTarget) Restart(ctx context.Context, members ...int) error {
	for _, i := range members {
		if m := t.c.Members()[i]; !m.Running() {
			if err := m.Restart(); err != nil {
				return err
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return t.c.WaitReady(wctx)
}

// TestRobustnessCompat runs the same traffic and faults against 3-member
// clusters of real etcd 3.4, 3.5 and 3.6 (`make robustness-compat`), for
// ROBUSTNESS_DURATION each (default 20 s), seed ROBUSTNESS_SEED.
func TestRobustnessCompat(t *testing.T) {
	d := 20 * time.Second
	if v := os.Getenv("ROBUSTNESS_DURATION"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatalf("ROBUSTNESS_DURATION: %v", err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("ROBUSTNESS_SEED"); v != "" && v != "0" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("ROBUSTNESS_SEED: %v", err)
		}
	}
	compat.ForEachVersion(t, func(t *testing.T, b compat.Binaries) {
		c := compat.Start(t, b, compat.Options{})
		rep, err := Run(context.Background(), Config{
			Target: compatTarget{c}, Seed: seed, Duration: d, Workers: 3, Children: 1,
			ChildCmd: childCmd, Baton: buildBaton(t), Etcdctl: b.Etcdctl, Log: logWriter{t},
		})
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		rep.Print(&out)
		t.Log(out.String())
		fmt.Printf("etcd %s: %s\n", b.Minor, rep.Summary())
		if len(rep.Violations) > 0 {
			t.Errorf("etcd %s: %d violations (seed %d)", b.Minor, len(rep.Violations), rep.Seed)
		}
	})
}
