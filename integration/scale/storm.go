package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/batonhq/baton/integration/bench"
	"github.com/batonhq/baton/integration/netproxy"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/retry"
	"github.com/batonhq/baton/mutex"
	"github.com/batonhq/baton/session"
)

// StormConfig sizes the storm phase: Locks mutexes held across Sessions
// baton sessions in a holder process of their own (Binary run as
// "<Binary> child storm ..."), whose clients reach one embedded etcd member
// (fsync on, in this process) through a netproxy, which is blackholed for
// Outage and then restored. The holders live in another process so that
// their heap (about 1 KiB per lock) and its garbage collection do not
// slow the member whose latency is measured, as in production.
type StormConfig struct {
	// Binary is the executable run as "<Binary> child storm <args>"; its
	// child command must call Child. DefaultStormConfig sets this
	// program's own executable.
	Binary string
	// Locks is the number of mutexes held, each on its own name.
	Locks int
	// Sessions is the number of baton sessions (one etcd client each).
	Sessions int
	// Outage is how long the proxy blackholes the sessions' traffic; it
	// must exceed TTL so that the server expires every lease.
	Outage time.Duration
	// TTL is each session's lease TTL, whole seconds, at least
	// session.MinTTL; the safety margin is TTL/5.
	TTL time.Duration
	// Rate caps re-acquisitions per second across all sessions once etcd
	// answers again (each session gets Rate/Sessions). Zero means
	// RateFraction of the request rate measured while taking the locks in
	// the same run (a paced re-acquisition is one request: the sessions'
	// enqueue groups form only when many go at once).
	Rate float64
	// RateFraction is the share of the measured request rate used when
	// Rate is zero: more than 0, at most 1; zero means 1/8. That rate is
	// what etcd served these sessions a moment before: an eighth of it
	// leaves most of the member to everyone else. Measured here (20,000
	// locks, 20 sessions, before enqueues were grouped): at 1/4 the direct
	// client's Get p99 during the recovery was 5.4× its quiet p99, at 1/8
	// 2.2×, at 1/16 3.7× (the machine's own noise).
	RateFraction float64
	// RecoveryBudget, when set with Rate zero, raises the cap to
	// Locks/RecoveryBudget where RateFraction of the measured rate would
	// take longer (a loaded machine measures a low rate): the phase's
	// time budget. StormResult.RateShare says what share of the measured
	// request rate the cap was.
	RecoveryBudget time.Duration
	// Quiet is how long etcd's latency is probed before the cut.
	Quiet time.Duration
	// AttemptTimeout bounds one Lock attempt of a re-acquirer.
	AttemptTimeout time.Duration
	// Deadline bounds the recovery; zero means 3 × Locks/Rate + 30 s.
	Deadline time.Duration
	// Floor, when set, is how long raw etcd concurrency takes new locks
	// after the recovery, on as many sessions through the same proxy and
	// clients at the same rate, while the probes run: the latency this
	// machine gives under that load without baton, the recovery's floor.
	Floor time.Duration
}

// DefaultStormConfig is the full-size storm: 100,000 locks, 20 sessions,
// a 20 s outage, 6 s leases, re-acquisition capped at an eighth of the
// rate measured while taking the locks but no lower than 100,000 in 2
// minutes; the holders run in this program's executable.
func DefaultStormConfig() StormConfig {
	return StormConfig{Binary: stormExecutable(), Locks: 100_000, Sessions: 20, Outage: 20 * time.Second, TTL: 6 * time.Second,
		Quiet: 5 * time.Second, AttemptTimeout: 2 * time.Second, RecoveryBudget: 2 * time.Minute, Floor: 20 * time.Second}
}

// stormExecutable is this program's executable, empty if unknown.
func stormExecutable() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
}

// stormDefaultFraction is the share of the measured acquisition rate the
// re-acquisition is capped at when StormConfig says neither.
const stormDefaultFraction = 1.0 / 8

// stormWorkers is how many Lock calls of one session run at once, while
// taking the locks and while taking them again (paced by the gate then).
const stormWorkers = 32

// stormScanPeriod is how often the holder process looks for ended holds.
const stormScanPeriod = 10 * time.Millisecond

// stormMaxAttempts bounds the Lock attempts of one re-acquisition.
const stormMaxAttempts = 1000

// Validate rejects sizes the phase cannot run with, naming the field and
// its bound.
func (c StormConfig) Validate() error {
	var errs []error
	if err := procCheckBinary("storm", c.Binary); err != nil {
		errs = append(errs, err)
	}
	if c.Locks <= 0 {
		errs = append(errs, fmt.Errorf("storm: Locks must be at least 1, got %d", c.Locks))
	}
	if c.Sessions <= 0 {
		errs = append(errs, fmt.Errorf("storm: Sessions must be at least 1, got %d", c.Sessions))
	} else if c.Locks > 0 && c.Sessions > c.Locks {
		errs = append(errs, fmt.Errorf("storm: Sessions must be at most Locks (%d), got %d", c.Locks, c.Sessions))
	}
	if c.TTL < session.MinTTL || c.TTL%time.Second != 0 {
		errs = append(errs, fmt.Errorf("storm: TTL must be whole seconds and at least %v, got %v", session.MinTTL, c.TTL))
	}
	if c.Outage <= c.TTL {
		errs = append(errs, fmt.Errorf("storm: Outage must exceed TTL (%v) so that the server expires the leases, got %v", c.TTL, c.Outage))
	}
	if c.RecoveryBudget < 0 {
		errs = append(errs, fmt.Errorf("storm: RecoveryBudget must be at least 0 (0: none), got %v", c.RecoveryBudget))
	}
	if c.Rate < 0 {
		errs = append(errs, fmt.Errorf("storm: Rate must be at least 0 (0: RateFraction of the measured rate), got %g", c.Rate))
	}
	if c.RateFraction < 0 || c.RateFraction > 1 {
		errs = append(errs, fmt.Errorf("storm: RateFraction must be in (0, 1] (0: 1/8), got %g", c.RateFraction))
	}
	if c.Quiet < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("storm: Quiet must be at least 100ms, got %v", c.Quiet))
	}
	if c.AttemptTimeout < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("storm: AttemptTimeout must be at least 100ms, got %v", c.AttemptTimeout))
	}
	if c.Deadline < 0 {
		errs = append(errs, fmt.Errorf("storm: Deadline must be at least 0 (0: 3 × Locks/Rate + 30s), got %v", c.Deadline))
	}
	if c.Floor < 0 {
		errs = append(errs, fmt.Errorf("storm: Floor must be at least 0 (0: none), got %v", c.Floor))
	}
	if c.Locks > 0 {
		if _, mem := procLimits(); mem > 0 && uint64(c.Locks)*stormMemPerLock > mem {
			errs = append(errs, fmt.Errorf("storm: Locks must be at most %d with %d MiB available (%d B allowed per lock), got %d",
				mem/stormMemPerLock, mem>>20, stormMemPerLock, c.Locks))
		}
	}
	return errors.Join(errs...)
}

// stormMemPerLock is what the memory check allows per lock, for the holder
// process (about 9 KiB a lock at 100,000 measured, Mutex and handles
// included) and the member's index and watch buffers.
const stormMemPerLock = 24 << 10

// StormResult is what the storm measured.
type StormResult struct {
	OK       bool     `json:"ok"`
	Failures []string `json:"failures,omitempty"`

	Locks         int     `json:"locks"`
	Sessions      int     `json:"sessions"`
	OutageSeconds float64 `json:"outage_seconds"`
	TTLSeconds    float64 `json:"ttl_seconds"`
	// AcquireSeconds is how long taking every lock took at first,
	// unthrottled; AcquirePerSecond the rate.
	AcquireSeconds   float64 `json:"acquire_seconds"`
	AcquirePerSecond float64 `json:"acquire_per_second"`
	// RequestsPerAcquire is requests sent per lock while taking them.
	RequestsPerAcquire float64 `json:"requests_per_acquire"`
	// HolderMaxRSS is the holder process's peak resident memory.
	HolderMaxRSS int64 `json:"holder_max_rss_bytes"`

	// Lost counts holders whose Context ended. EndedBeforeExpiry counts
	// those that ended before the send time of their lease's last
	// acknowledged renewal + TTL (the earliest the server can expire it);
	// SlackMin is the least time left to that instant.
	Lost              int           `json:"lost"`
	EndedBeforeExpiry int           `json:"ended_before_expiry"`
	SlackMin          time.Duration `json:"slack_min_ns"`
	// ServerDeleted counts first holders' keys seen deleted by the server
	// (lease expiry) through a direct watch; EndedBeforeDelete those whose
	// Context had ended by then; ServerSlackMin the least lead.
	ServerDeleted     int           `json:"server_deleted"`
	EndedBeforeDelete int           `json:"ended_before_delete"`
	ServerSlackMin    time.Duration `json:"server_slack_min_ns"`
	// ScanMax is the longest scan of the holder process for ended holds:
	// each loss is timed late by at most stormScanPeriod (10 ms) plus it.
	// HolderLagOutage is the holder process's worst scheduling delay
	// during the outage (a 5 ms sleep's oversleep), HolderLagRecovery
	// during the recovery: a loss timed late by less than that may be
	// the machine's starvation of the process rather than baton's.
	ScanMax           time.Duration `json:"scan_max_ns"`
	HolderLagOutage   time.Duration `json:"holder_lag_outage_ns"`
	HolderLagRecovery time.Duration `json:"holder_lag_recovery_ns"`
	// LossAfterCut is the spread of Context ends after the cut.
	LossAfterCutMin time.Duration `json:"loss_after_cut_min_ns"`
	LossAfterCutMax time.Duration `json:"loss_after_cut_max_ns"`

	// RateShare is Rate / (AcquirePerSecond × RequestsPerAcquire): of the
	// request rate measured while taking the locks.
	RateShare float64 `json:"rate_share"`
	// Rate is the re-acquisition cap used. RequestBound is the request
	// rate it implies: Rate × stormRequestsPerReacquire + the quiet
	// background (renewals) + 4 requests per session re-established
	// (lease grant, namespace watch).
	Rate         float64 `json:"rate"`
	RequestBound float64 `json:"request_bound_per_second"`
	// QuietPerSecond is requests/s while the locks were held (renewals).
	QuietPerSecond float64 `json:"quiet_per_second"`
	// Peak5sPerSecond is the most requests/s sent over any 5 s (sliding
	// by 100 ms) from the restore to every lock held, which the bound
	// checks; PeakPerSecond the same over 1 s, where Lock's own retries
	// while etcd stalls show; OutagePeakPerSecond that during the outage.
	Peak5sPerSecond     float64 `json:"peak_5s_per_second"`
	PeakPerSecond       float64 `json:"peak_per_second"`
	OutagePeakPerSecond float64 `json:"outage_peak_per_second"`
	// Attempts counts Lock attempts after the losses; FailedAttempts those
	// that failed (all of them while etcd was cut off).
	Attempts       int64 `json:"attempts"`
	FailedAttempts int64 `json:"failed_attempts"`
	// Relost counts holds taken again after the restore that were lost
	// again before every lock was held, by cause, and taken again; a
	// figure, not a failure (each such Context still has to end before
	// its lease's expiry, which is checked). RelostSlackMin is the least
	// time such a loss left to its lease's earliest expiry.
	Relost         int            `json:"relost"`
	RelostCauses   map[string]int `json:"relost_causes,omitempty"`
	RelostSlackMin time.Duration  `json:"relost_slack_min_ns"`
	// EventsPerAcquire, WatchMessagesPerAcquire and UnaryPerAcquire are
	// what the member counted from the restore to every lock held
	// (etcd_debugging_mvcc_events_total, Watch messages sent, unary
	// requests answered) per Lock attempt; the events include the
	// harness's own deletion watch.
	EventsPerAcquire        float64 `json:"events_per_acquire"`
	WatchMessagesPerAcquire float64 `json:"watch_messages_per_acquire"`
	UnaryPerAcquire         float64 `json:"unary_per_acquire"`
	// Reheld counts locks held again; RecoverySeconds is from the restore
	// to the instant every lock was held at once; PredictedSeconds is
	// Locks/Rate + the longest backoff, what the cap alone allows.
	Reheld           int     `json:"reheld"`
	RecoverySeconds  float64 `json:"recovery_seconds"`
	PredictedSeconds float64 `json:"predicted_seconds"`
	// Latency of probes by a client that bypasses the proxy: a
	// linearizable Get every 10 ms and a Put every 50 ms, while quiet
	// (before the cut) and during the recovery.
	QuietGetP50, QuietGetP99       time.Duration
	RecoveryGetP50, RecoveryGetP99 time.Duration
	QuietPutP50, QuietPutP99       time.Duration
	RecoveryPutP50, RecoveryPutP99 time.Duration
	// ProbeSamples: Gets quiet, Gets during recovery, Puts quiet, Puts
	// during recovery.
	ProbeSamples [4]int `json:"probe_samples"`
	// The floor (StormConfig.Floor): FloorLocks taken by raw etcd
	// concurrency at Rate in FloorSeconds, and the probes' p99 meanwhile,
	// with their ratios to the quiet p99 beside baton's recovery's.
	FloorLocks         int           `json:"floor_locks,omitempty"`
	FloorSeconds       float64       `json:"floor_seconds,omitempty"`
	FloorGetP99        time.Duration `json:"floor_get_p99_ns,omitempty"`
	FloorPutP99        time.Duration `json:"floor_put_p99_ns,omitempty"`
	FloorGetRatio      float64       `json:"floor_get_ratio,omitempty"`
	FloorPutRatio      float64       `json:"floor_put_ratio,omitempty"`
	RecoveryGetRatio   float64       `json:"recovery_get_ratio,omitempty"`
	RecoveryPutRatio   float64       `json:"recovery_put_ratio,omitempty"`
	FloorFailedAttempt int           `json:"floor_failed_attempts,omitempty"`
	// Timeline is one entry per second from the cut to the end of the
	// recovery.
	Timeline []StormSecond `json:"timeline"`
	// CloseSessionsSeconds and CloseMutexesSeconds time the holder
	// process's cleanup: Close of its sessions (each revokes its lease and
	// so deletes its keys), then of its Mutexes.
	CloseSessionsSeconds float64 `json:"close_sessions_seconds"`
	CloseMutexesSeconds  float64 `json:"close_mutexes_seconds"`
	// KeysLeft counts keys under the storm's namespace (and the raw
	// floor's) after the holder process closed its sessions, but the
	// namespace's release marks (/<ns>/v1/released, released-b).
	KeysLeft int `json:"keys_left"`
}

// StormSecond is one second of the storm: requests the sessions sent, locks
// held at its end, and the direct probes' p99.
type StormSecond struct {
	// Second counts from the cut; the restore is at the outage's length.
	Second   int   `json:"second"`
	Requests int64 `json:"requests"`
	Held     int64 `json:"held"`
	// HolderLag is the holder process's worst scheduling delay.
	HolderLag time.Duration `json:"holder_lag_ns"`
	// Events is the watch events the holder's clients received.
	Events int64         `json:"events"`
	GetP99 time.Duration `json:"get_p99_ns"`
	PutP99 time.Duration `json:"put_p99_ns"`
}

// stormGate paces one session's re-acquirers. While the session is
// failing (a hold was lost, or an attempt failed) only one attempt, a
// probe, is let through at a time, after a full-jitter exponential
// backoff (100 ms doubling to 2 s), so sessions never retry in step; once
// a probe succeeds the others are let through one every `every`.
type stormGate struct {
	every time.Duration

	mu        sync.Mutex
	next      time.Time
	failing   bool
	probing   bool
	failures  int
	recovered chan struct{}
}

// stormRequestsPerReacquire is what a paced re-acquisition may send: its
// enqueue, and a tenth more for retries and lost replies' cleanups.
const stormRequestsPerReacquire = 1.1

// stormMaxBackoff is the longest backoff of a failing session's probe.
const stormMaxBackoff = 2 * time.Second

func newStormGate(every time.Duration) *stormGate {
	return &stormGate{every: every, recovered: make(chan struct{})}
}

func stormBackoff(failures int) time.Duration {
	d := min(100*time.Millisecond<<min(failures, 5), stormMaxBackoff)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// admit waits for the caller's turn; probe says it is the failing
// session's one probe.
func (g *stormGate) admit(ctx context.Context) (probe bool, err error) {
	for range stormMaxAttempts {
		g.mu.Lock()
		if !g.failing {
			now := time.Now()
			if g.next.Before(now) {
				g.next = now
			}
			at := g.next
			g.next = g.next.Add(g.every)
			g.mu.Unlock()
			return false, retry.Sleep(ctx, time.Until(at))
		}
		if !g.probing {
			g.probing = true
			d := stormBackoff(g.failures)
			g.mu.Unlock()
			return true, retry.Sleep(ctx, d)
		}
		ch := g.recovered
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return false, errors.New("storm: gate: too many turns")
}

func (g *stormGate) fail() {
	g.mu.Lock()
	if !g.failing {
		g.failing, g.failures, g.recovered = true, 0, make(chan struct{})
	}
	g.failures++
	g.mu.Unlock()
}

func (g *stormGate) done(probe bool, err error) {
	if err != nil {
		g.fail()
	}
	g.mu.Lock()
	if err == nil && g.failing {
		g.failing, g.failures = false, 0
		close(g.recovered)
	}
	if probe {
		g.probing = false
	}
	g.mu.Unlock()
}

// stormNamespace holds the storm's keys.
const stormNamespace = "scale-storm"

// stormWindow is 100 ms of the holder process: requests its clients sent,
// and locks held at its end. At is wall-clock Unix ns, so that the parent
// can lay it beside its own instants.
type stormWindow struct {
	At   int64 `json:"at"`
	N    int64 `json:"n"`
	Held int64 `json:"held"`
	// Lag is the longest a 5 ms sleep overslept in the window: the
	// process's scheduling delay (CPU starvation).
	Lag time.Duration `json:"lag"`
	// Events is the watch events its clients received.
	Events int64 `json:"events"`
}

// stormLoss is the end of a lock's first hold: when (Unix ns; zero if it
// never ended) and its lease's earliest expiry, the send time of the last
// acknowledged renewal + TTL.
type stormLoss struct {
	Key    string `json:"key"`
	Lost   int64  `json:"lost"`
	Expiry int64  `json:"expiry"`
	Cause  string `json:"cause,omitempty"`
}

// stormReady is the holder's first stdout line, once every lock is held.
type stormReady struct {
	AcquireSeconds     float64 `json:"acquire_seconds"`
	AcquirePerSecond   float64 `json:"acquire_per_second"`
	RequestsPerAcquire float64 `json:"requests_per_acquire"`
	Rate               float64 `json:"rate"`
	Deadline           int64   `json:"deadline_ns"`
}

// stormReport is what the holder writes to its report file at its end.
type stormReport struct {
	Windows        []stormWindow  `json:"windows"`
	Losses         []stormLoss    `json:"losses"`
	Reheld         int            `json:"reheld"`
	AllHeld        int64          `json:"all_held"` // Unix ns when every lock was last held at once
	Attempts       int64          `json:"attempts"`
	Failed         int64          `json:"failed"`
	Relost         int            `json:"relost"`
	RelostCauses   map[string]int `json:"relost_causes"`
	RelostSlackMin time.Duration  `json:"relost_slack_min"`
	// CloseSessions and CloseMutexes time the cleanup.
	CloseSessions time.Duration `json:"close_sessions"`
	CloseMutexes  time.Duration `json:"close_mutexes"`
	// ScanMax is the longest scan for ended holds.
	ScanMax time.Duration `json:"scan_max"`
	// FloorStart and FloorEnd (Unix ns) bound the raw floor's window,
	// FloorLocks the locks it took, FloorFailed its failed attempts.
	FloorStart  int64    `json:"floor_start,omitempty"`
	FloorEnd    int64    `json:"floor_end,omitempty"`
	FloorLocks  int      `json:"floor_locks,omitempty"`
	FloorFailed int      `json:"floor_failed,omitempty"`
	Errors      []string `json:"errors"`
}

type stormSample struct {
	at  time.Time
	lat time.Duration
}

// Storm runs the storm phase: a holder process takes Locks locks across
// Sessions sessions; etcd is cut off for Outage, then restored, and the
// holder takes every lock again under the rate cap. It checks that every
// holder's Context ended before its lease could expire (and before the
// server deleted its key), that the requests stayed under the bound the
// cap implies, that a direct client's p99 latency during the recovery
// stayed within 5× its quiet p99, and that every lock was held again.
// A failed check is in StormResult.Failures (OK false); an error means the
// phase could not run.
func Storm(ctx context.Context, cfg StormConfig, progress io.Writer) (StormResult, error) {
	if err := cfg.Validate(); err != nil {
		return StormResult{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	res := StormResult{Locks: cfg.Locks, Sessions: cfg.Sessions, OutageSeconds: cfg.Outage.Seconds(), TTLSeconds: cfg.TTL.Seconds()}

	srv, err := embedetcd.New(embedetcd.Config{})
	if err != nil {
		return res, err
	}
	defer srv.Stop()
	proxy, err := netproxy.New(srv.Etcd().Clients[0].Addr().String())
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	probeCli, err := srv.NewClient()
	if err != nil {
		return res, err
	}
	defer probeCli.Close()
	dir, err := os.MkdirTemp("", "baton-storm-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	reportPath := filepath.Join(dir, "report.json")

	// The holder process. Its hard limit: taking the locks at 200/s at
	// worst, then the quiet time, the outage and the recovery's deadline.
	hardCtx, cancelHard := context.WithTimeout(ctx, time.Duration(cfg.Locks/200)*time.Second+time.Minute+cfg.Quiet+cfg.Outage+cfg.Floor+
		max(cfg.Deadline, time.Duration(3*cfg.Locks/100)*time.Second+30*time.Second)+time.Minute)
	defer cancelHard()
	cmd := exec.CommandContext(hardCtx, cfg.Binary, "child", "storm", "-endpoint", proxy.Endpoint(),
		"-locks", strconv.Itoa(cfg.Locks), "-sessions", strconv.Itoa(cfg.Sessions), "-ttl", cfg.TTL.String(),
		"-rate", strconv.FormatFloat(cfg.Rate, 'g', -1, 64), "-fraction", strconv.FormatFloat(cfg.RateFraction, 'g', -1, 64), "-budget", cfg.RecoveryBudget.String(),
		"-attempt-timeout", cfg.AttemptTimeout.String(), "-deadline", cfg.Deadline.String(), "-floor", cfg.Floor.String(), "-report", reportPath)
	var stderr procTail
	cmd.Stderr = &stderr
	// One core for the holder process, the other for the member: on a
	// small machine the holder's garbage collector would otherwise take
	// both while it marks its heap, stalling the member as no separate
	// etcd machine would be.
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, err
	}
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("storm: starting the holder process: %w", err)
	}
	waited := make(chan error, 1)
	allHeldSeen := make(chan struct{}) // the holder's second line
	var (
		srvMu                  sync.Mutex
		srvStart, srvEnd       ServerStats
		srvStartErr, srvEndErr error
	)
	var readyLine []byte
	readyErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			readyLine = slices.Clone(sc.Bytes())
			readyErr <- nil
		} else {
			readyErr <- fmt.Errorf("no ready line: %v", sc.Err())
		}
		// The second line says every lock is held, before the holder's
		// cleanup: the server's counters then cover the recovery alone.
		if sc.Scan() {
			st, err := ReadServer(nil)
			srvMu.Lock()
			srvEnd, srvEndErr = st, err
			srvMu.Unlock()
			close(allHeldSeen)
		}
		_, _ = io.Copy(io.Discard, stdout)
		waited <- cmd.Wait()
	}()
	holderFailed := func(what string, err error) (StormResult, error) {
		_ = stdin.Close()
		cancelHard()
		<-waited
		return res, fmt.Errorf("storm: holder process: %s: %v: %s", what, err, strings.TrimSpace(stderr.String()))
	}
	if err := <-readyErr; err != nil {
		return holderFailed("taking the locks", err)
	}
	var ready stormReady
	if err := json.Unmarshal(readyLine, &ready); err != nil {
		return holderFailed("ready line", err)
	}
	res.AcquireSeconds, res.AcquirePerSecond, res.RequestsPerAcquire, res.Rate = ready.AcquireSeconds, ready.AcquirePerSecond, ready.RequestsPerAcquire, ready.Rate
	res.PredictedSeconds = float64(cfg.Locks)/res.Rate + stormMaxBackoff.Seconds()
	res.RateShare = res.Rate / (res.AcquirePerSecond * res.RequestsPerAcquire)
	fmt.Fprintf(progress, "storm: took %d locks on %d sessions in %.2f s (%.0f/s, %.2f requests each)\n",
		cfg.Locks, cfg.Sessions, res.AcquireSeconds, res.AcquirePerSecond, res.RequestsPerAcquire)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stopRun()

	// Probes by a client that bypasses the proxy.
	var (
		probeMu   sync.Mutex
		getProbes []stormSample
		putProbes []stormSample
	)
	probe := func(every time.Duration, op func(context.Context) error, out *[]stormSample) {
		stormEvery(runCtx, every, func(time.Time) {
			pctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
			s := time.Now()
			err := op(pctx)
			lat := time.Since(s)
			cancel()
			if err != nil {
				if runCtx.Err() != nil {
					return
				}
				lat = 5 * time.Second
			}
			probeMu.Lock()
			*out = append(*out, stormSample{s, lat})
			probeMu.Unlock()
		})
	}
	bg.Go(func() {
		probe(10*time.Millisecond, func(c context.Context) error { _, err := probeCli.Get(c, "scale-storm-probe"); return err }, &getProbes)
	})
	bg.Go(func() {
		probe(50*time.Millisecond, func(c context.Context) error { _, err := probeCli.Put(c, "scale-storm-probe", "x"); return err }, &putProbes)
	})

	// The server's deletions of the holders' keys, seen directly.
	var (
		delMu   sync.Mutex
		deleted = make(map[string]int64, cfg.Locks)
	)
	wctx, stopWatch := context.WithCancel(clientv3.WithRequireLeader(runCtx))
	defer stopWatch()
	wch := probeCli.Watch(wctx, "/"+stormNamespace+"/", clientv3.WithPrefix(), clientv3.WithFilterPut())
	bg.Go(func() {
		// Not through the holder's cleanup: its revocations delete every key.
		select {
		case <-allHeldSeen:
		case <-runCtx.Done():
		}
		stopWatch()
	})
	bg.Go(func() {
		for wr := range wch {
			now := time.Now().UnixNano()
			delMu.Lock()
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					if _, ok := deleted[string(ev.Kv.Key)]; !ok {
						deleted[string(ev.Kv.Key)] = now
					}
				}
			}
			delMu.Unlock()
		}
	})

	quietStart := time.Now()
	if err := retry.Sleep(ctx, cfg.Quiet); err != nil {
		return holderFailed("quiet", err)
	}
	cut := time.Now()
	proxy.Blackhole()
	fmt.Fprintf(progress, "storm: etcd cut off for %v\n", cfg.Outage)
	if err := retry.Sleep(ctx, cfg.Outage); err != nil {
		proxy.Restore()
		return holderFailed("outage", err)
	}
	st, err := ReadServer(nil)
	srvMu.Lock()
	srvStart, srvStartErr = st, err
	srvMu.Unlock()
	restore := time.Now()
	proxy.Restore()
	if _, err := io.WriteString(stdin, "restored\n"); err != nil {
		return holderFailed("telling it the restore", err)
	}
	fmt.Fprintf(progress, "storm: traffic restored; re-acquiring at most %.0f/s (%.2f of the measured request rate; predicted %.1f s)\n", res.Rate, res.RateShare, res.PredictedSeconds)
	werr := <-waited
	stopRun()
	bg.Wait()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.HolderMaxRSS = int64(ru.Maxrss) << 10
	}
	if werr != nil {
		return res, fmt.Errorf("storm: holder process: %v: %s", werr, strings.TrimSpace(stderr.String()))
	}
	b, err := os.ReadFile(reportPath)
	if err != nil {
		return res, fmt.Errorf("storm: holder process's report: %w", err)
	}
	var rep stormReport
	if err := json.Unmarshal(b, &rep); err != nil {
		return res, fmt.Errorf("storm: holder process's report: %w", err)
	}
	res.Failures = append(res.Failures, stormFirst(rep.Errors, 5)...)
	res.Attempts, res.FailedAttempts, res.Reheld, res.ScanMax = rep.Attempts, rep.Failed, rep.Reheld, rep.ScanMax
	res.CloseSessionsSeconds, res.CloseMutexesSeconds = rep.CloseSessions.Seconds(), rep.CloseMutexes.Seconds()
	res.Relost, res.RelostCauses, res.RelostSlackMin = rep.Relost, rep.RelostCauses, rep.RelostSlackMin
	end := time.Now()
	if rep.AllHeld > 0 {
		end = time.Unix(0, rep.AllHeld)
		res.RecoverySeconds = end.Sub(restore).Seconds()
	} else {
		res.Failures = append(res.Failures, "the locks were never all held again")
	}

	// What the recovery cost the server, per re-acquisition.
	srvMu.Lock()
	switch {
	case srvStartErr != nil || srvEndErr != nil:
		res.Failures = append(res.Failures, fmt.Sprintf("reading the member's metrics: %v", errors.Join(srvStartErr, srvEndErr)))
	case srvEnd.Events > 0 && rep.Attempts > 0:
		d := srvEnd.Sub(srvStart)
		res.EventsPerAcquire = d.Events / float64(rep.Attempts)
		res.WatchMessagesPerAcquire = d.WatchMessages / float64(rep.Attempts)
		res.UnaryPerAcquire = d.Unary / float64(rep.Attempts)
	}
	srvMu.Unlock()

	// Losses of the first holds, against their leases' expiry as the
	// client knows it and the server's deletion of their keys.
	res.SlackMin, res.ServerSlackMin, res.LossAfterCutMin = 1<<62, 1<<62, 1<<62
	var late, lateServer []string
	for i, l := range rep.Losses {
		if l.Lost != 0 {
			res.Lost++
			if l.Lost < l.Expiry {
				res.EndedBeforeExpiry++
			} else {
				late = append(late, fmt.Sprintf("lock %d: Context ended %v after renewal+TTL", i, time.Duration(l.Lost-l.Expiry)))
			}
			res.SlackMin = min(res.SlackMin, time.Duration(l.Expiry-l.Lost))
			res.LossAfterCutMin = min(res.LossAfterCutMin, time.Duration(l.Lost-cut.UnixNano()))
			res.LossAfterCutMax = max(res.LossAfterCutMax, time.Duration(l.Lost-cut.UnixNano()))
			if l.Lost < cut.UnixNano() {
				late = append(late, fmt.Sprintf("lock %d lost before the cut: %s", i, l.Cause))
			}
		}
		if at, ok := deleted[l.Key]; ok {
			res.ServerDeleted++
			switch {
			case l.Lost == 0:
				lateServer = append(lateServer, fmt.Sprintf("lock %d: key deleted by the server, Context never ended", i))
			case l.Lost < at:
				res.EndedBeforeDelete++
				res.ServerSlackMin = min(res.ServerSlackMin, time.Duration(at-l.Lost))
			default:
				lateServer = append(lateServer, fmt.Sprintf("lock %d: Context ended %v after the server deleted the key", i, time.Duration(l.Lost-at)))
			}
		}
	}
	if res.Lost == 0 {
		res.SlackMin, res.LossAfterCutMin = 0, 0
	}
	if res.EndedBeforeDelete == 0 {
		res.ServerSlackMin = 0
	}
	res.Failures = append(res.Failures, stormFirst(late, 5)...)
	res.Failures = append(res.Failures, stormFirst(lateServer, 5)...)
	if res.Lost != cfg.Locks {
		res.Failures = append(res.Failures, fmt.Sprintf("%d of %d holders' Context ended", res.Lost, cfg.Locks))
	}
	if res.ServerDeleted != cfg.Locks {
		res.Failures = append(res.Failures, fmt.Sprintf("the server deleted %d of %d first holders' keys", res.ServerDeleted, cfg.Locks))
	}
	if res.Reheld != cfg.Locks {
		res.Failures = append(res.Failures, fmt.Sprintf("%d of %d locks held again", res.Reheld, cfg.Locks))
	}

	// Requests: the quiet rate, then the peaks of any 1 s.
	var quietN int64
	for _, w := range rep.Windows {
		if w.At > quietStart.UnixNano() && w.At <= cut.UnixNano() {
			quietN += w.N
		}
		switch {
		case w.At > cut.UnixNano() && w.At <= restore.UnixNano():
			res.HolderLagOutage = max(res.HolderLagOutage, w.Lag)
		case w.At > restore.UnixNano() && w.At <= end.UnixNano()+int64(100*time.Millisecond):
			res.HolderLagRecovery = max(res.HolderLagRecovery, w.Lag)
		}
	}
	res.QuietPerSecond = float64(quietN) / cut.Sub(quietStart).Seconds()
	res.RequestBound = res.Rate*stormRequestsPerReacquire + res.QuietPerSecond + 4*float64(cfg.Sessions)
	// The most requests in any span (1 s, 5 s) starting in [from, to].
	peak := func(span time.Duration, from, to int64) float64 {
		var best float64
		per := int(span / (100 * time.Millisecond))
		for i, w := range rep.Windows {
			if w.At < from || w.At > to {
				continue
			}
			var n int64
			j := i
			for ; j < len(rep.Windows) && rep.Windows[j].At < w.At+int64(span); j++ {
				n += rep.Windows[j].N
			}
			if j-i < per {
				n = n * int64(per) / int64(j-i) // a short tail, scaled to the span
			}
			best = max(best, float64(n)/span.Seconds())
		}
		return best
	}
	res.PeakPerSecond = peak(time.Second, restore.UnixNano(), end.UnixNano())
	res.Peak5sPerSecond = peak(5*time.Second, restore.UnixNano(), end.UnixNano())
	res.OutagePeakPerSecond = peak(time.Second, cut.UnixNano()+int64(100*time.Millisecond), restore.UnixNano()-int64(time.Second))
	if res.Peak5sPerSecond > res.RequestBound {
		res.Failures = append(res.Failures, fmt.Sprintf("%.0f requests/s over 5 s after the restore exceeds the bound %.0f", res.Peak5sPerSecond, res.RequestBound))
	}

	// Probe latencies.
	split := func(ps []stormSample) (quiet, rec []time.Duration) {
		for _, p := range ps {
			switch {
			case !p.at.Before(quietStart) && p.at.Before(cut):
				quiet = append(quiet, p.lat)
			case !p.at.Before(restore) && !p.at.After(end):
				rec = append(rec, p.lat)
			}
		}
		return quiet, rec
	}
	qg, rg := split(getProbes)
	qp, rp := split(putProbes)
	res.ProbeSamples = [4]int{len(qg), len(rg), len(qp), len(rp)}
	res.QuietGetP50, res.QuietGetP99 = pct(qg, 50), pct(qg, 99)
	res.RecoveryGetP50, res.RecoveryGetP99 = pct(rg, 50), pct(rg, 99)
	res.QuietPutP50, res.QuietPutP99 = pct(qp, 50), pct(qp, 99)
	res.RecoveryPutP50, res.RecoveryPutP99 = pct(rp, 50), pct(rp, 99)
	if res.QuietGetP99 > 0 && res.RecoveryGetP99 > 5*res.QuietGetP99 {
		res.Failures = append(res.Failures, fmt.Sprintf("Get p99 during recovery %v exceeds 5× the quiet p99 %v", res.RecoveryGetP99, res.QuietGetP99))
	}
	if res.QuietPutP99 > 0 && res.RecoveryPutP99 > 5*res.QuietPutP99 {
		res.Failures = append(res.Failures, fmt.Sprintf("Put p99 during recovery %v exceeds 5× the quiet p99 %v", res.RecoveryPutP99, res.QuietPutP99))
	}
	res.Timeline = stormTimeline(cut, end, rep.Windows, getProbes, putProbes)
	if rep.FloorEnd > rep.FloorStart {
		from, to := time.Unix(0, rep.FloorStart), time.Unix(0, rep.FloorEnd)
		within := func(ps []stormSample) (out []time.Duration) {
			for _, p := range ps {
				if !p.at.Before(from) && !p.at.After(to) {
					out = append(out, p.lat)
				}
			}
			return out
		}
		res.FloorLocks, res.FloorSeconds, res.FloorFailedAttempt = rep.FloorLocks, to.Sub(from).Seconds(), rep.FloorFailed
		res.FloorGetP99, res.FloorPutP99 = pct(within(getProbes), 99), pct(within(putProbes), 99)
		ratio := func(a, b time.Duration) float64 {
			if b <= 0 {
				return 0
			}
			return float64(a) / float64(b)
		}
		res.FloorGetRatio, res.FloorPutRatio = ratio(res.FloorGetP99, res.QuietGetP99), ratio(res.FloorPutP99, res.QuietPutP99)
		res.RecoveryGetRatio, res.RecoveryPutRatio = ratio(res.RecoveryGetP99, res.QuietGetP99), ratio(res.RecoveryPutP99, res.QuietPutP99)
	}

	left, err := stormKeysLeft(ctx, probeCli, stormNamespace)
	if err != nil {
		return res, fmt.Errorf("storm: %w", err)
	}
	rawLeft, err := stormKeysLeft(ctx, probeCli, stormNamespace+"-raw")
	if err != nil {
		return res, fmt.Errorf("storm: %w", err)
	}
	left = append(left, rawLeft...)
	res.KeysLeft = len(left)
	if res.KeysLeft != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d keys left under /%s/ after cleanup, first %q", res.KeysLeft, stormNamespace, left[0]))
	}
	fmt.Fprintf(progress, "storm: %d of %d holders' Context ended before renewal+TTL (least slack %v), %d of %d before the server deleted their key (least lead %v); losses timed within %v; holder process's scheduling lag up to %v in the outage\n",
		res.EndedBeforeExpiry, res.Lost, res.SlackMin.Round(time.Millisecond), res.EndedBeforeDelete, res.ServerDeleted, res.ServerSlackMin.Round(time.Millisecond),
		(stormScanPeriod + res.ScanMax).Round(time.Millisecond), res.HolderLagOutage.Round(time.Millisecond))
	if res.Relost > 0 {
		fmt.Fprintf(progress, "storm: %d holds taken again after the restore were lost again (%v) and taken again\n", res.Relost, res.RelostCauses)
	}
	fmt.Fprintf(progress, "storm: the recovery cost the member %.2f watch events, %.2f watch messages and %.2f unary requests per Lock attempt\n",
		res.EventsPerAcquire, res.WatchMessagesPerAcquire, res.UnaryPerAcquire)
	fmt.Fprintf(progress, "storm: the holder process closed its sessions in %.1f s and its Mutexes in %.1f s\n", res.CloseSessionsSeconds, res.CloseMutexesSeconds)
	fmt.Fprintf(progress, "storm: %d of %d held again in %.2f s (cap %.0f/s, predicted %.1f s); requests/s at most %.0f over 5 s, %.0f over 1 s (bound %.0f); Get p99 quiet %v recovery %v; Put p99 quiet %v recovery %v\n",
		res.Reheld, cfg.Locks, res.RecoverySeconds, res.Rate, res.PredictedSeconds, res.Peak5sPerSecond, res.PeakPerSecond, res.RequestBound,
		res.QuietGetP99, res.RecoveryGetP99, res.QuietPutP99, res.RecoveryPutP99)
	if res.FloorLocks > 0 {
		fmt.Fprintf(progress, "storm: floor: raw etcd concurrency took %d locks at the same cap in %.1f s: Get p99 %v (%.1f× quiet; baton's recovery %.1f×), Put p99 %v (%.1f× quiet; baton's recovery %.1f×)\n",
			res.FloorLocks, res.FloorSeconds, res.FloorGetP99, res.FloorGetRatio, res.RecoveryGetRatio, res.FloorPutP99, res.FloorPutRatio, res.RecoveryPutRatio)
	}
	res.OK = len(res.Failures) == 0
	return res, nil
}

// stormTimeline buckets the windows and probes by second from cut to end.
func stormTimeline(cut, end time.Time, windows []stormWindow, getProbes, putProbes []stormSample) []StormSecond {
	secs := int(end.Sub(cut)/time.Second) + 1
	if secs < 1 {
		return nil
	}
	tl := make([]StormSecond, secs)
	gets, puts := make([][]time.Duration, secs), make([][]time.Duration, secs)
	for i := range tl {
		tl[i].Second = i
	}
	bucket := func(ns int64) int {
		if ns < cut.UnixNano() {
			return -1
		}
		if b := int((ns - cut.UnixNano()) / int64(time.Second)); b < secs {
			return b
		}
		return -1
	}
	for _, w := range windows {
		if b := bucket(w.At); b >= 0 {
			tl[b].Requests += w.N
			tl[b].Events += w.Events
			tl[b].Held = w.Held
			tl[b].HolderLag = max(tl[b].HolderLag, w.Lag)
		}
	}
	for _, p := range getProbes {
		if b := bucket(p.at.UnixNano()); b >= 0 {
			gets[b] = append(gets[b], p.lat)
		}
	}
	for _, p := range putProbes {
		if b := bucket(p.at.UnixNano()); b >= 0 {
			puts[b] = append(puts[b], p.lat)
		}
	}
	for i := range tl {
		tl[i].GetP99, tl[i].PutP99 = pct(gets[i], 99), pct(puts[i], 99)
	}
	return tl
}

// stormHolder is the holder process ("<Binary> child storm ..."): it takes
// the locks, prints a stormReady line, and from then on takes every lost
// lock again through its session's gate; once the parent has written
// "restored" on stdin and every lock is held, it closes its sessions and
// writes its report.
func stormHolder(ctx context.Context, args []string, stdout, stderr io.Writer, stdin io.Reader) int {
	fs := flag.NewFlagSet("child storm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "etcd client URL (the proxy)")
	nLocks := fs.Int("locks", 0, "locks to hold")
	nSessions := fs.Int("sessions", 0, "sessions")
	ttl := fs.Duration("ttl", 6*time.Second, "lease TTL")
	rate := fs.Float64("rate", 0, "re-acquisitions per second (0: -fraction of the measured rate)")
	fraction := fs.Float64("fraction", 0, "share of the measured rate (0: 1/8)")
	budget := fs.Duration("budget", 0, "least rate: -locks per budget (0: none)")
	attemptTimeout := fs.Duration("attempt-timeout", 2*time.Second, "bound of one Lock attempt")
	deadline := fs.Duration("deadline", 0, "bound of the recovery (0: 3 × locks/rate + 30s)")
	floor := fs.Duration("floor", 0, "how long raw etcd concurrency takes locks at the same rate after the recovery (0: none)")
	reportPath := fs.String("report", "", "file to write the report to")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *endpoint == "" || *reportPath == "" || *nLocks < 1 || *nSessions < 1 || *nSessions > *nLocks {
		fmt.Fprintln(stderr, "child storm: -endpoint, -report, -locks and -sessions (at most -locks) are required")
		return 2
	}
	if *fraction == 0 {
		*fraction = stormDefaultFraction
	}
	rep, err := stormHold(ctx, *endpoint, *nLocks, *nSessions, *ttl, *rate, *fraction, *budget, *attemptTimeout, *deadline, *floor, stdout, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "child storm: %v\n", err)
		return 1
	}
	b, err := json.Marshal(rep)
	if err == nil {
		err = os.WriteFile(*reportPath, b, 0o600)
	}
	if err != nil {
		fmt.Fprintf(stderr, "child storm: report: %v\n", err)
		return 1
	}
	return 0
}

type stormLock struct {
	m     *mutex.Mutex
	sess  int
	first *mutex.Lock
	cur   atomic.Pointer[mutex.Lock] // the hold the scanner watches; nil while lost

	mu     sync.Mutex
	loss   stormLoss
	reheld bool
}

func stormHold(ctx context.Context, endpoint string, nLocks, nSessions int, ttl time.Duration, rate, fraction float64,
	budget, attemptTimeout, deadline, floor time.Duration, stdout io.Writer, stdin io.Reader) (*stormReport, error) {
	margin := ttl / 5
	counter := bench.NewCounter()
	sessions := make([]*session.Session, nSessions)
	clients := make([]*clientv3.Client, nSessions)
	locks := make([]*stormLock, nLocks)
	defer func() {
		// The sessions' Close revokes their leases (every key at once);
		// the Mutexes then have nothing left to release.
		for i := range sessions {
			if sessions[i] != nil {
				_ = sessions[i].Close()
			}
		}
		stormEach(len(locks), stormWorkers*nSessions, func(i int) {
			if locks[i] != nil {
				_ = locks[i].m.Close()
			}
		})
		for _, c := range clients {
			if c != nil {
				_ = c.Close()
			}
		}
	}()
	for i := range sessions {
		cli, err := clientv3.New(clientv3.Config{
			Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
			DialOptions: counter.DialOptions(),
		})
		if err != nil {
			return nil, err
		}
		clients[i] = cli
		s, err := session.New(cli, session.WithTTL(ttl), session.WithSafetyMargin(margin))
		if err != nil {
			return nil, err
		}
		sessions[i] = s
	}

	// Take every lock, unthrottled: stormWorkers Lock calls at once per
	// session.
	start := time.Now()
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for si := range sessions {
		for w := range stormWorkers {
			wg.Go(func() {
				for i := si + w*nSessions; i < nLocks; i += stormWorkers * nSessions {
					if first.Load() != nil {
						return
					}
					m, err := mutex.New(clients[si], fmt.Sprintf("storm-%d", i), mutex.WithNamespace(stormNamespace), mutex.WithSession(sessions[si]))
					if err == nil {
						var l *mutex.Lock
						lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
						l, err = m.Lock(lctx)
						cancel()
						if err == nil {
							locks[i] = &stormLock{m: m, sess: si, first: l, loss: stormLoss{Key: l.Key()}}
							continue
						}
						_ = m.Close()
					}
					err = fmt.Errorf("taking lock %d: %w", i, err)
					first.CompareAndSwap(nil, &err)
					return
				}
			})
		}
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return nil, *e
	}
	acq := time.Since(start)
	ready := stormReady{AcquireSeconds: acq.Seconds(), AcquirePerSecond: float64(nLocks) / acq.Seconds(),
		RequestsPerAcquire: float64(stormTotal(counter)) / float64(nLocks), Rate: rate}
	if ready.Rate == 0 {
		ready.Rate = ready.AcquirePerSecond * ready.RequestsPerAcquire * fraction
		if budget > 0 {
			ready.Rate = max(ready.Rate, float64(nLocks)/budget.Seconds())
		}
	}
	if deadline == 0 {
		deadline = time.Duration(3*float64(nLocks)/ready.Rate*float64(time.Second)) + 30*time.Second
	}
	ready.Deadline = int64(deadline)
	perSession := ready.Rate / float64(nSessions)
	gates := make([]*stormGate, nSessions)
	for i := range gates {
		gates[i] = newStormGate(time.Duration(float64(time.Second) / perSession))
	}

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var bg sync.WaitGroup
	defer bg.Wait()
	defer stopRun()

	// Requests sent, locks held and scheduling lag, in 100 ms windows.
	var lagMax atomic.Int64
	var held atomic.Int64
	held.Store(int64(nLocks))
	var (
		winMu   sync.Mutex
		windows []stormWindow
	)
	bg.Go(func() {
		last, lastEv := stormTotal(counter), counter.Events()
		stormEvery(runCtx, 100*time.Millisecond, func(now time.Time) {
			n, ev := stormTotal(counter), counter.Events()
			winMu.Lock()
			windows = append(windows, stormWindow{now.UnixNano(), n - last, held.Load(), time.Duration(lagMax.Swap(0)), ev - lastEv})
			winMu.Unlock()
			last, lastEv = n, ev
		})
	})

	// Every hold: when its Context ends, note when, and how far that was
	// from its lease's earliest expiry, and queue the lock for its
	// session's re-acquirers; a hold taken again and lost again (etcd too
	// slow to renew it in time) is taken again too.
	rep := &stormReport{RelostCauses: map[string]int{}, RelostSlackMin: 1 << 62}
	var (
		attempts atomic.Int64
		failed   atomic.Int64
		allHeld  atomic.Int64
		full     = make(chan struct{}, 1)
		repMu    sync.Mutex
	)
	report := func(f func()) {
		repMu.Lock()
		f()
		repMu.Unlock()
	}
	queues := make([]chan *stormLock, nSessions)
	for i := range queues {
		queues[i] = make(chan *stormLock, nLocks/nSessions+1)
	}
	lose := func(sl *stormLock) {
		held.Add(-1)
		gates[sl.sess].fail()
		queues[sl.sess] <- sl
	}
	// One scanner, not a goroutine per hold, notes every hold's end: its
	// timestamp is late by at most the scan period plus one scan (both
	// reported), where 100,000 AfterFunc goroutines started at once would
	// each be late by their own scheduling.
	for _, sl := range locks {
		sl.cur.Store(sl.first)
	}
	ended := func(sl *stormLock, l *mutex.Lock, now time.Time) {
		expiry := l.Deadline().Add(margin)
		cause := fmt.Sprint(context.Cause(l.Context()))
		if l == sl.first {
			sl.mu.Lock()
			sl.loss.Lost, sl.loss.Expiry, sl.loss.Cause = now.UnixNano(), expiry.UnixNano(), cause
			sl.mu.Unlock()
		} else {
			report(func() {
				rep.Relost++
				rep.RelostCauses[cause]++
				rep.RelostSlackMin = min(rep.RelostSlackMin, expiry.Sub(now))
				if !now.Before(expiry) && len(rep.Errors) < 20 {
					rep.Errors = append(rep.Errors, fmt.Sprintf("%s: a later hold's Context ended %v after renewal+TTL", sl.m.Name(), now.Sub(expiry)))
				}
			})
		}
		lose(sl)
	}
	bg.Go(func() {
		stormEvery(runCtx, stormScanPeriod, func(start time.Time) {
			for _, sl := range locks {
				l := sl.cur.Load()
				if l == nil {
					continue
				}
				select {
				case <-l.Done():
					sl.cur.Store(nil)
					ended(sl, l, time.Now())
				default:
				}
			}
			report(func() { rep.ScanMax = max(rep.ScanMax, time.Since(start)) })
		})
	})
	// Scheduling lag of this process: how late a 5 ms sleep wakes.
	bg.Go(func() {
		for runCtx.Err() == nil {
			t0 := time.Now()
			time.Sleep(5 * time.Millisecond)
			if lag := int64(time.Since(t0) - 5*time.Millisecond); lag > lagMax.Load() {
				lagMax.Store(lag)
			}
		}
	})
	reacquire := func(sl *stormLock) {
		g := gates[sl.sess]
		for range stormMaxAttempts {
			probe, err := g.admit(runCtx)
			if err != nil {
				return
			}
			actx, cancel := context.WithTimeout(runCtx, attemptTimeout)
			nl, err := sl.m.Lock(actx)
			cancel()
			attempts.Add(1)
			g.done(probe, err)
			if err == nil {
				sl.mu.Lock()
				sl.reheld = true
				sl.mu.Unlock()
				sl.cur.Store(nl)
				if held.Add(1) == int64(nLocks) {
					allHeld.Store(time.Now().UnixNano())
					select {
					case full <- struct{}{}:
					default:
					}
				}
				return
			}
			failed.Add(1)
			if runCtx.Err() != nil {
				return
			}
			if errors.Is(err, mutex.ErrInvalid) || errors.Is(err, mutex.ErrClosed) {
				report(func() { rep.Errors = append(rep.Errors, fmt.Sprintf("re-acquiring %s: %v", sl.m.Name(), err)) })
				return
			}
		}
		report(func() {
			rep.Errors = append(rep.Errors, fmt.Sprintf("re-acquiring %s: no success in %d attempts", sl.m.Name(), stormMaxAttempts))
		})
	}
	var workers sync.WaitGroup
	defer workers.Wait()
	defer stopRun()
	for si := range nSessions {
		for range stormWorkers {
			workers.Go(func() {
				for {
					select {
					case <-runCtx.Done():
						return
					case sl := <-queues[si]:
						reacquire(sl)
					}
				}
			})
		}
	}

	b, err := json.Marshal(ready)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
		return nil, err
	}

	// Wait for the parent's "restored", then for every lock held.
	restored := make(chan struct{})
	eof := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			if sc.Text() == "restored" {
				close(restored)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdin)
		close(eof)
	}()
	select {
	case <-restored:
	case <-eof:
		return nil, errors.New("stdin closed before the restore")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	dl := time.NewTimer(deadline)
	defer dl.Stop()
wait:
	for range nLocks + 1 { // each turn but the last follows a re-acquisition
		if held.Load() == int64(nLocks) {
			break
		}
		select {
		case <-full:
		case <-dl.C:
			report(func() {
				rep.Errors = append(rep.Errors, fmt.Sprintf("only %d of %d locks held at once within %v of the restore", held.Load(), nLocks, deadline))
			})
			break wait
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if _, err := fmt.Fprintf(stdout, "{\"all_held\":%d}\n", allHeld.Load()); err != nil {
		return nil, err
	}
	stopRun()
	workers.Wait()
	bg.Wait()

	var fl stormFloorResult
	if floor > 0 {
		fl = stormFloor(ctx, clients, ttl, ready.Rate, floor)
	}

	// Cleanup, timed: the sessions' Close revokes their leases (every key
	// at once). A Mutex's Close still sends a guarded delete of its hold,
	// which the revoke already deleted: a Raft round trip each (20,000
	// took 11.7 s on 32 goroutines), so they run on as many goroutines as
	// took the locks, for etcd to batch them.
	t0 := time.Now()
	for _, s := range sessions {
		_ = s.Close()
	}
	t1 := time.Now()
	stormEach(len(locks), stormWorkers*nSessions, func(i int) { _ = locks[i].m.Close() })
	rep.CloseSessions, rep.CloseMutexes = t1.Sub(t0), time.Since(t1)

	repMu.Lock()
	defer repMu.Unlock()
	rep.Windows = windows
	rep.FloorStart, rep.FloorEnd, rep.FloorLocks, rep.FloorFailed = fl.start, fl.end, fl.locks, fl.failed
	if fl.err != nil {
		rep.Errors = append(rep.Errors, fmt.Sprintf("the raw floor: %v", fl.err))
	}
	rep.AllHeld = allHeld.Load()
	if held.Load() == int64(nLocks) && rep.AllHeld == 0 {
		rep.AllHeld = time.Now().UnixNano() // every lock held without a loss
	}
	rep.Attempts, rep.Failed = attempts.Load(), failed.Load()
	if rep.Relost == 0 {
		rep.RelostSlackMin = 0
	}
	rep.Losses = make([]stormLoss, nLocks)
	for i, sl := range locks {
		sl.mu.Lock()
		rep.Losses[i] = sl.loss
		if sl.reheld {
			rep.Reheld++
		}
		sl.mu.Unlock()
	}
	return rep, nil
}

type stormFloorResult struct {
	start, end    int64
	locks, failed int
	err           error
}

// stormFloor takes new locks with raw etcd concurrency for d, one session
// per client, each paced at rate/len(clients) as baton's re-acquirers are,
// at most stormWorkers at once per session; the sessions' Close at the end
// (outside the window) revokes them.
func stormFloor(ctx context.Context, clients []*clientv3.Client, ttl time.Duration, rate float64, d time.Duration) stormFloorResult {
	var r stormFloorResult
	sessions := make([]*concurrency.Session, 0, len(clients))
	defer func() {
		for _, s := range sessions {
			_ = s.Close()
		}
	}()
	for _, c := range clients {
		s, err := concurrency.NewSession(c, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			r.err = err
			return r
		}
		sessions = append(sessions, s)
	}
	every := time.Duration(float64(time.Second) * float64(len(clients)) / rate)
	fctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var locks, failed atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for si, s := range sessions {
		wg.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			slots := make(chan struct{}, stormWorkers)
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for i := 0; ; i++ {
				select {
				case <-tick.C:
				case <-fctx.Done():
					return
				}
				select {
				case slots <- struct{}{}:
				case <-fctx.Done():
					return
				}
				inflight.Go(func() {
					defer func() { <-slots }()
					m := concurrency.NewMutex(s, fmt.Sprintf("/%s-raw/%d/%d", stormNamespace, si, i))
					lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
					defer lcancel()
					if err := m.Lock(lctx); err != nil {
						failed.Add(1)
						return
					}
					locks.Add(1)
				})
			}
		})
	}
	wg.Wait()
	r.start, r.end = start.UnixNano(), time.Now().UnixNano()
	r.locks, r.failed = int(locks.Load()), int(failed.Load())
	return r
}

// stormKeysLeft lists the keys under namespace ns but its release mark
// marks (/<ns>/v1/released and released-b, no lease: kept by design).
func stormKeysLeft(ctx context.Context, cli *clientv3.Client, ns string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pfx := "/" + ns + "/"
	r, err := cli.Get(ctx, pfx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("listing keys left under %s: %w", pfx, err)
	}
	var left []string
	for _, kv := range r.Kvs {
		if k := string(kv.Key); !keys.IsReleased(k) {
			left = append(left, k)
		}
	}
	return left, nil
}

// stormTotal sums a counter's requests over every method.
func stormTotal(c *bench.Counter) int64 {
	var n int64
	for _, v := range c.Snapshot() {
		n += v
	}
	return n
}

// stormEvery runs f with the tick's time every d until ctx ends.
func stormEvery(ctx context.Context, d time.Duration, f func(now time.Time)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			f(now)
		}
	}
}

// stormEach runs f(0..n-1) on workers goroutines.
func stormEach(n, workers int, f func(i int)) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				f(i)
			}
		})
	}
	wg.Wait()
}

// stormFirst keeps the first n of msgs, saying how many more there were.
func stormFirst(msgs []string, n int) []string {
	if len(msgs) <= n {
		return msgs
	}
	return append(slices.Clone(msgs[:n]), fmt.Sprintf("... and %d more", len(msgs)-n))
}
