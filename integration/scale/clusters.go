package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/router"
	"github.com/batonhq/baton/session"
)

// ClustersConfig sizes the across-clusters phase: for each count in
// Counts, a router over that many independent embedded etcd clusters (one
// member each, fsync on, all on this machine), one namespace per cluster,
// Workers goroutines per cluster each locking and unlocking its own name
// for Window; then, on the same members in the same run, the same number
// of goroutines doing plain etcd Puts for Window: the floor. Runs
// alternates the two, for a median and a spread.
type ClustersConfig struct {
	// Counts are the cluster counts measured, each at least 1; the
	// largest is how many members start.
	Counts []int
	// Workers is the number of lock loops (and Put loops) per cluster.
	Workers int
	// Window is how long each measure runs.
	Window time.Duration
	// Runs is how many times each measure runs.
	Runs int
	// TTL is each cluster's session TTL, whole seconds, at least
	// session.MinTTL.
	TTL time.Duration
}

// DefaultClustersConfig is the full size: 1, 2 and 4 clusters, 16 lock
// loops per cluster, three 3 s windows of each measure.
func DefaultClustersConfig() ClustersConfig {
	return ClustersConfig{Counts: []int{1, 2, 4}, Workers: 16, Window: 3 * time.Second, Runs: 3, TTL: 10 * time.Second}
}

// cluMaxClusters bounds Counts: each is an embedded member of this
// process.
const cluMaxClusters = 16

// Validate rejects sizes the phase cannot run with, naming the field and
// its bound.
func (c ClustersConfig) Validate() error {
	var errs []error
	if len(c.Counts) == 0 {
		errs = append(errs, errors.New("clusters: Counts must list at least one cluster count"))
	}
	for i, n := range c.Counts {
		if n < 1 || n > cluMaxClusters {
			errs = append(errs, fmt.Errorf("clusters: Counts[%d] must be in [1, %d], got %d", i, cluMaxClusters, n))
		}
	}
	if c.Workers <= 0 {
		errs = append(errs, fmt.Errorf("clusters: Workers must be at least 1, got %d", c.Workers))
	}
	if c.Window < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("clusters: Window must be at least 100ms, got %v", c.Window))
	}
	if c.Runs <= 0 {
		errs = append(errs, fmt.Errorf("clusters: Runs must be at least 1, got %d", c.Runs))
	}
	errs = append(errs, checkTTL("clusters", c.TTL))
	return errors.Join(errs...)
}

// ClustersRow is one cluster count's figures; every rate is per second,
// summed over the clusters, with its median and spread over the runs.
type ClustersRow struct {
	Clusters int `json:"clusters"`
	// Acquisitions is baton's lock+unlock cycles per second, Puts the raw
	// etcd Put floor on the same members.
	Acquisitions Spread `json:"acquisitions_per_second"`
	Puts         Spread `json:"puts_per_second"`
	// WritesPerAcquisition is etcd revisions per cycle (the lock's and
	// the release's transactions): FloorAcquisitions = Puts /
	// WritesPerAcquisition is what the Put floor allows, and OfFloor the
	// share of it baton reaches (medians).
	WritesPerAcquisition float64 `json:"writes_per_acquisition"`
	FloorAcquisitions    float64 `json:"floor_acquisitions_per_second"`
	OfFloor              float64 `json:"of_floor"`
	// CPU is the share of the machine's cores busy during baton's windows
	// (every process, from /proc/stat), Cores the machine's core count,
	// OwnCores the cores this process used (its clients and members).
	CPU      float64 `json:"cpu_busy"`
	Cores    int     `json:"cores"`
	OwnCores float64 `json:"own_cores"`
	// FsyncBusy is the share of each member's time spent in WAL fsyncs
	// during baton's windows, FsyncMean the mean fsync.
	FsyncBusy float64       `json:"fsync_busy"`
	FsyncMean time.Duration `json:"fsync_mean_ns"`
	// Limit says what bounds the row on this machine.
	Limit string `json:"limit"`
}

// ClustersResult is what the across-clusters phase measured.
type ClustersResult struct {
	OK       bool          `json:"ok"`
	Failures []string      `json:"failures,omitempty"`
	Workers  int           `json:"workers_per_cluster"`
	Window   time.Duration `json:"window_ns"`
	Runs     int           `json:"runs"`
	Rows     []ClustersRow `json:"rows"`
	// FdatasyncP50 and FdatasyncP99 are a 4 KiB write + fdatasync on the
	// members' disk, measured in the same run (harness.FdatasyncFloor): the
	// least one acknowledged etcd write batch costs.
	FdatasyncP50 time.Duration `json:"fdatasync_p50_ns"`
	FdatasyncP99 time.Duration `json:"fdatasync_p99_ns"`
	// KeysLeft counts keys left under the phase's namespaces, but their
	// release marks.
	KeysLeft int `json:"keys_left"`
}

// Table is the measured rows, one per cluster count.
func (r ClustersResult) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "clusters\tacquisitions/s\tetcd Puts/s (floor)\twrites/acq\tof floor\tCPU busy\tfsync busy\tlimit\n")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.2f\t%.0f %%\t%.0f %% of %d cores\t%.0f %% (mean %v)\t%s\n",
			row.Clusters, row.Acquisitions, row.Puts, row.WritesPerAcquisition, 100*row.OfFloor,
			100*row.CPU, row.Cores, 100*row.FsyncBusy, row.FsyncMean.Round(10*time.Microsecond), row.Limit)
	}
	tw.Flush()
	fmt.Fprintf(&b, "(%d lock loops per cluster, %d runs of %v each; median [min–max]; fdatasync on the members' disk p50 %v p99 %v)\n",
		r.Workers, r.Runs, r.Window, r.FdatasyncP50.Round(10*time.Microsecond), r.FdatasyncP99.Round(10*time.Microsecond))
	return b.String()
}

// cluNamespace is the namespace cluster i serves.
func cluNamespace(i int) string { return fmt.Sprintf("scale-clu-%d", i) }

// cluSample is the machine's counters at one instant.
type cluSample struct {
	at           time.Time
	busy, total  uint64 // /proc/stat jiffies
	own          time.Duration
	fsyncs       uint64
	fsyncSeconds float64
}

func cluNow() cluSample {
	s := cluSample{at: time.Now()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			s.total += n
			if i != 3 && i != 4 { // idle, iowait
				s.busy += n
			}
		}
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.own = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if mfs, err := prometheus.DefaultGatherer.Gather(); err == nil {
		for _, mf := range mfs {
			if mf.GetName() == "etcd_disk_wal_fsync_duration_seconds" {
				for _, m := range mf.GetMetric() {
					s.fsyncs += m.GetHistogram().GetSampleCount()
					s.fsyncSeconds += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return s
}

// Clusters runs the across-clusters phase. A failed check is in
// ClustersResult.Failures (OK false); an error means the phase could not
// run.
func Clusters(ctx context.Context, cfg ClustersConfig, progress io.Writer) (ClustersResult, error) {
	if err := cfg.Validate(); err != nil {
		return ClustersResult{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	res := ClustersResult{Workers: cfg.Workers, Window: cfg.Window, Runs: cfg.Runs}
	most := slices.Max(cfg.Counts)
	members := make([]*embedetcd.Server, 0, most)
	defer func() {
		for _, m := range members {
			m.Stop()
		}
	}()
	for i := range most {
		m, err := embedetcd.New(embedetcd.Config{Name: fmt.Sprintf("clu-%d", i)})
		if err != nil {
			return res, err
		}
		members = append(members, m)
	}
	syncs, err := harness.FdatasyncFloor(members[0].Dir(), 200)
	if err != nil {
		return res, fmt.Errorf("clusters: fdatasync floor: %w", err)
	}
	res.FdatasyncP50, res.FdatasyncP99 = harness.Percentile(syncs, 50), harness.Percentile(syncs, 99)

	// One router over every member; a row uses the first n namespaces.
	var m router.Map
	for i, mem := range members {
		m.Clusters = append(m.Clusters, router.Cluster{Name: fmt.Sprintf("clu-%d", i), Endpoints: mem.Endpoints(), Namespaces: []string{cluNamespace(i)}})
	}
	r, err := router.New(m, router.WithLogger(zap.NewNop()))
	if err != nil {
		return res, err
	}
	defer r.Close()
	clients := make([]*clientv3.Client, most)
	sessions := make([]*session.Session, most)
	defer func() {
		for _, s := range sessions {
			if s != nil {
				_ = s.Close()
			}
		}
	}()
	for i := range most {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		clients[i], err = r.Client(cctx, cluNamespace(i))
		cancel()
		if err != nil {
			return res, err
		}
		if sessions[i], err = session.New(clients[i], session.WithTTL(cfg.TTL)); err != nil {
			return res, err
		}
	}
	mutexes := make([][]*mutex.Mutex, most)
	defer func() {
		for _, ms := range mutexes {
			for _, mu := range ms {
				_ = mu.Close()
			}
		}
	}()
	for i := range most {
		for w := range cfg.Workers {
			mu, err := mutex.New(clients[i], fmt.Sprintf("w%d", w), mutex.WithNamespace(cluNamespace(i)), mutex.WithSession(sessions[i]))
			if err != nil {
				return res, err
			}
			mutexes[i] = append(mutexes[i], mu)
		}
	}

	var failures []string
	for _, n := range cfg.Counts {
		row := ClustersRow{Clusters: n, Cores: cluCores()}
		var acq, puts []float64
		var revs, cycles int64
		var cpu, own, fsyncBusy, fsyncMean []float64
		for range cfg.Runs {
			// baton: lock and unlock, every loop its own name.
			before := cluNow()
			rev0, err := cluRevisions(ctx, clients[:n])
			if err != nil {
				return res, err
			}
			count, err := cluLoop(ctx, n, cfg.Workers, cfg.Window, func(c, w int) error {
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				l, err := mutexes[c][w].Lock(lctx)
				if err != nil {
					return err
				}
				return l.Unlock(lctx)
			})
			after := cluNow()
			if err != nil {
				failures = append(failures, fmt.Sprintf("%d clusters: lock loop: %v", n, err))
			}
			rev1, rerr := cluRevisions(ctx, clients[:n])
			if rerr != nil {
				return res, rerr
			}
			wall := after.at.Sub(before.at).Seconds()
			acq = append(acq, float64(count)/wall)
			revs += rev1 - rev0
			cycles += count
			if after.total > before.total {
				cpu = append(cpu, float64(after.busy-before.busy)/float64(after.total-before.total))
			}
			own = append(own, (after.own-before.own).Seconds()/wall)
			if f := after.fsyncs - before.fsyncs; f > 0 {
				fsyncBusy = append(fsyncBusy, (after.fsyncSeconds-before.fsyncSeconds)/wall/float64(n))
				fsyncMean = append(fsyncMean, (after.fsyncSeconds-before.fsyncSeconds)/float64(f))
			}

			// The floor: plain Puts, the same loops on the same members.
			before = cluNow()
			count, err = cluLoop(ctx, n, cfg.Workers, cfg.Window, func(c, w int) error {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				_, err := clients[c].Put(pctx, fmt.Sprintf("/%s/floor/%d", cluNamespace(c), w), "x")
				return err
			})
			after = cluNow()
			if err != nil {
				failures = append(failures, fmt.Sprintf("%d clusters: put loop: %v", n, err))
			}
			puts = append(puts, float64(count)/after.at.Sub(before.at).Seconds())
		}
		row.Acquisitions, row.Puts = spread(acq), spread(puts)
		if cycles > 0 {
			row.WritesPerAcquisition = float64(revs) / float64(cycles)
		}
		if row.WritesPerAcquisition > 0 {
			row.FloorAcquisitions = row.Puts.Median / row.WritesPerAcquisition
			row.OfFloor = row.Acquisitions.Median / row.FloorAcquisitions
		}
		row.CPU, row.OwnCores, row.FsyncBusy = spread(cpu).Median, spread(own).Median, spread(fsyncBusy).Median
		row.FsyncMean = time.Duration(spread(fsyncMean).Median * float64(time.Second))
		row.Limit = cluLimit(row)
		res.Rows = append(res.Rows, row)
		fmt.Fprintf(progress, "clusters: %d: %s acquisitions/s, floor %s Puts/s (%.2f writes each: %.0f %% of the floor); CPU %.0f %%, fsync busy %.0f %%: %s\n",
			n, row.Acquisitions, row.Puts, row.WritesPerAcquisition, 100*row.OfFloor, 100*row.CPU, 100*row.FsyncBusy, row.Limit)
	}

	// Cleanup: the floor's keys, the sessions (their leases and keys).
	for i := range most {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := clients[i].Delete(dctx, "/"+cluNamespace(i)+"/floor/", clientv3.WithPrefix())
		cancel()
		if err != nil {
			return res, fmt.Errorf("clusters: deleting the floor's keys: %w", err)
		}
	}
	for i, s := range sessions {
		_ = s.Close()
		for _, mu := range mutexes[i] {
			_ = mu.Close()
		}
		left, err := stormKeysLeft(ctx, clients[i], cluNamespace(i))
		if err != nil {
			return res, fmt.Errorf("clusters: %w", err)
		}
		res.KeysLeft += len(left)
		if len(left) > 0 {
			failures = append(failures, fmt.Sprintf("%d keys left under /%s/, first %q", len(left), cluNamespace(i), left[0]))
		}
	}
	res.Failures = stormFirst(failures, 20)
	res.OK = len(res.Failures) == 0
	return res, nil
}

// cluLimit names what bounds a row: the machine's CPU when nearly every
// core is busy, the disk when the members spend most of their time in
// fsync, else the loops' own latency.
func cluLimit(row ClustersRow) string {
	switch {
	case row.CPU >= 0.85:
		return fmt.Sprintf("CPU: %.0f %% of %d cores busy (this process %.2f cores)", 100*row.CPU, row.Cores, row.OwnCores)
	case row.FsyncBusy >= 0.7:
		return fmt.Sprintf("fsync: each member %.0f %% of its time in WAL fsync", 100*row.FsyncBusy)
	default:
		return "latency: neither CPU nor fsync saturated"
	}
}

// cluCores is the machine's core count as /proc/stat lists them.
func cluCores() int {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "cpu") && !strings.HasPrefix(l, "cpu ") {
			n++
		}
	}
	return n
}

// cluRevisions sums the clusters' current revisions.
func cluRevisions(ctx context.Context, clis []*clientv3.Client) (int64, error) {
	var sum int64
	for _, c := range clis {
		gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		r, err := c.Get(gctx, "scale-clu-revision")
		cancel()
		if err != nil {
			return 0, fmt.Errorf("clusters: reading the revision: %w", err)
		}
		sum += r.Header.Revision
	}
	return sum, nil
}

// cluMaxOps bounds one goroutine's calls in a window.
const cluMaxOps = 10_000_000

// cluLoop runs op(c, w) in a loop on workers goroutines per cluster c <
// clusters for window, and returns how many calls succeeded and the first
// error (which stops that goroutine).
func cluLoop(ctx context.Context, clusters, workers int, window time.Duration, op func(c, w int) error) (int64, error) {
	var n atomic.Int64
	var first atomic.Pointer[error]
	deadline := time.Now().Add(window)
	var wg sync.WaitGroup
	for c := range clusters {
		for w := range workers {
			wg.Go(func() {
				for range cluMaxOps {
					if !time.Now().Before(deadline) || ctx.Err() != nil {
						return
					}
					if err := op(c, w); err != nil {
						first.CompareAndSwap(nil, &err)
						return
					}
					n.Add(1)
				}
			})
		}
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return n.Load(), *e
	}
	return n.Load(), ctx.Err()
}
