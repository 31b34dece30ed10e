package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonhq/baton/integration/harness"
	"github.com/batonhq/baton/internal/embedetcd"
	"github.com/batonhq/baton/internal/keys"
	"github.com/batonhq/baton/internal/netproxy"
	"github.com/batonhq/baton/internal/retry"
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
	// enqueue groups form only when many go at once; the rate counts what
	// etcd served, not the watch creates on the sessions' streams, a
	// message each that is no Raft entry and no read).
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
	return StormConfig{Binary: harness.Executable(), Locks: 100_000, Sessions: 20, Outage: 20 * time.Second, TTL: 6 * time.Second,
		Quiet: 5 * time.Second, AttemptTimeout: 2 * time.Second, RecoveryBudget: 2 * time.Minute, Floor: 20 * time.Second}
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
	if err := harness.CheckBinary("storm", c.Binary); err != nil {
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
	errs = append(errs, checkTTL("storm", c.TTL))
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
		if _, mem := harness.Limits(); mem > 0 && uint64(c.Locks)*stormMemPerLock > mem {
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
	// (lease grant, watch stream).
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
//
// Its steps, in order: setUp (the member, the proxy the holder goes
// through, a direct client), hold (the holder process takes the locks),
// observe (probes and the server's deletions, until the recovery ends),
// cut (quiet time, the outage, the restore), recover (the holder takes
// every lock again and reports), report (the checks and the figures).
func Storm(ctx context.Context, cfg StormConfig, progress io.Writer) (StormResult, error) {
	if err := cfg.Validate(); err != nil {
		return StormResult{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	s := &storm{cfg: cfg, progress: progress,
		res: StormResult{Locks: cfg.Locks, Sessions: cfg.Sessions, OutageSeconds: cfg.Outage.Seconds(), TTLSeconds: cfg.TTL.Seconds()}}
	tearDown, err := s.setUp()
	if err != nil {
		return s.res, err
	}
	defer tearDown()
	if err := s.hold(ctx); err != nil {
		return s.res, err
	}
	defer s.cancelHard()
	stopObserving := s.observe(ctx)
	defer stopObserving()
	if err := s.cut(ctx); err != nil {
		return s.res, err
	}
	if err := s.recover(stopObserving); err != nil {
		return s.res, err
	}
	if err := s.report(ctx); err != nil {
		return s.res, err
	}
	return s.res, nil
}

// storm is one run of the storm phase, filled in step by step.
type storm struct {
	cfg      StormConfig
	progress io.Writer
	res      StormResult

	// setUp
	srv        *embedetcd.Server
	proxy      *netproxy.Proxy
	probeCli   *clientv3.Client // bypasses the proxy
	reportPath string

	// hold
	holder      *harness.Child
	stdin       io.WriteCloser
	cancelHard  context.CancelFunc
	waited      chan error    // the holder's exit
	allHeldSeen chan struct{} // the holder's second line
	srvMu       sync.Mutex
	srvStart    ServerStats // at the restore
	srvEnd      ServerStats // when every lock was held again
	srvStartErr error
	srvEndErr   error

	// observe
	probeMu   sync.Mutex
	getProbes []stormSample
	putProbes []stormSample
	delMu     sync.Mutex
	deleted   map[string]int64 // key → when the server deleted it (Unix ns)

	// cut and recover
	quietStart, cutAt, restore, end time.Time
	rep                             stormReport
}

// setUp starts the member, the proxy the holder process goes through and
// a client beside it; tearDown undoes it.
func (s *storm) setUp() (tearDown func(), err error) {
	var undo []func()
	tearDown = func() {
		for _, f := range slices.Backward(undo) {
			f()
		}
	}
	defer func() {
		if err != nil {
			tearDown()
		}
	}()
	if s.srv, err = embedetcd.New(embedetcd.Config{}); err != nil {
		return nil, err
	}
	undo = append(undo, s.srv.Stop)
	if s.proxy, err = netproxy.New(s.srv.Etcd().Clients[0].Addr().String()); err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = s.proxy.Close() })
	if s.probeCli, err = s.srv.NewClient(); err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = s.probeCli.Close() })
	dir, err := os.MkdirTemp("", "baton-storm-")
	if err != nil {
		return nil, err
	}
	undo = append(undo, func() { _ = os.RemoveAll(dir) })
	s.reportPath = filepath.Join(dir, "report.json")
	return tearDown, nil
}

// hold starts the holder process and waits until it holds every lock.
func (s *storm) hold(ctx context.Context) error {
	cfg := s.cfg
	// The holder process's hard limit: taking the locks at 200/s at
	// worst, then the quiet time, the outage and the recovery's deadline.
	hardCtx, cancelHard := context.WithTimeout(ctx, time.Duration(cfg.Locks/200)*time.Second+time.Minute+cfg.Quiet+cfg.Outage+cfg.Floor+
		max(cfg.Deadline, time.Duration(3*cfg.Locks/100)*time.Second+30*time.Second)+time.Minute)
	s.cancelHard = cancelHard
	// On one core (harness.NewChild), the other left to the member.
	s.holder = harness.NewChild(hardCtx, cfg.Binary, "storm", 15*time.Second, "-endpoint", s.proxy.Endpoint(),
		"-locks", strconv.Itoa(cfg.Locks), "-sessions", strconv.Itoa(cfg.Sessions), "-ttl", cfg.TTL.String(),
		"-rate", strconv.FormatFloat(cfg.Rate, 'g', -1, 64), "-fraction", strconv.FormatFloat(cfg.RateFraction, 'g', -1, 64), "-budget", cfg.RecoveryBudget.String(),
		"-attempt-timeout", cfg.AttemptTimeout.String(), "-deadline", cfg.Deadline.String(), "-floor", cfg.Floor.String(), "-report", s.reportPath)
	stdin, err := s.holder.StdinPipe()
	if err != nil {
		cancelHard()
		return err
	}
	s.stdin = stdin
	stdout, err := s.holder.StdoutPipe()
	if err != nil {
		cancelHard()
		return err
	}
	if err := s.holder.Start(); err != nil {
		cancelHard()
		return fmt.Errorf("storm: starting the holder process: %w", err)
	}
	s.waited = make(chan error, 1)
	s.allHeldSeen = make(chan struct{})
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
			s.srvMu.Lock()
			s.srvEnd, s.srvEndErr = st, err
			s.srvMu.Unlock()
			close(s.allHeldSeen)
		}
		_, _ = io.Copy(io.Discard, stdout)
		s.waited <- s.holder.Wait()
	}()
	if err := <-readyErr; err != nil {
		return s.holderFailed("taking the locks", err)
	}
	var ready stormReady
	if err := json.Unmarshal(readyLine, &ready); err != nil {
		return s.holderFailed("ready line", err)
	}
	res := &s.res
	res.AcquireSeconds, res.AcquirePerSecond, res.RequestsPerAcquire, res.Rate = ready.AcquireSeconds, ready.AcquirePerSecond, ready.RequestsPerAcquire, ready.Rate
	res.PredictedSeconds = float64(cfg.Locks)/res.Rate + stormMaxBackoff.Seconds()
	res.RateShare = res.Rate / (res.AcquirePerSecond * res.RequestsPerAcquire)
	fmt.Fprintf(s.progress, "storm: took %d locks on %d sessions in %.2f s (%.0f/s, %.2f requests each)\n",
		cfg.Locks, cfg.Sessions, res.AcquireSeconds, res.AcquirePerSecond, res.RequestsPerAcquire)
	return nil
}

// holderFailed stops the holder process and says why the phase could not
// run, with the end of its stderr.
func (s *storm) holderFailed(what string, err error) error {
	_ = s.stdin.Close()
	s.cancelHard()
	<-s.waited
	return fmt.Errorf("storm: holder process: %s: %v: %s", what, err, s.holder.Stderr())
}

// observe starts the probes of the client beside the proxy (a Get every
// 10 ms, a Put every 50 ms) and a watch of the server's deletions of the
// holders' keys; stop ends them and waits for them. Idempotent.
func (s *storm) observe(ctx context.Context) (stop func()) {
	runCtx, stopRun := context.WithCancel(ctx)
	var bg sync.WaitGroup
	probe := func(every time.Duration, op func(context.Context) error, out *[]stormSample) {
		stormEvery(runCtx, every, func(time.Time) {
			pctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
			start := time.Now()
			err := op(pctx)
			lat := time.Since(start)
			cancel()
			if err != nil {
				if runCtx.Err() != nil {
					return
				}
				lat = 5 * time.Second
			}
			s.probeMu.Lock()
			*out = append(*out, stormSample{start, lat})
			s.probeMu.Unlock()
		})
	}
	bg.Go(func() {
		probe(10*time.Millisecond, func(c context.Context) error { _, err := s.probeCli.Get(c, "scale-storm-probe"); return err }, &s.getProbes)
	})
	bg.Go(func() {
		probe(50*time.Millisecond, func(c context.Context) error { _, err := s.probeCli.Put(c, "scale-storm-probe", "x"); return err }, &s.putProbes)
	})

	s.deleted = make(map[string]int64, s.cfg.Locks)
	wctx, stopWatch := context.WithCancel(clientv3.WithRequireLeader(runCtx))
	wch := s.probeCli.Watch(wctx, "/"+stormNamespace+"/", clientv3.WithPrefix(), clientv3.WithFilterPut())
	bg.Go(func() {
		// Not through the holder's cleanup: its revocations delete every key.
		select {
		case <-s.allHeldSeen:
		case <-runCtx.Done():
		}
		stopWatch()
	})
	bg.Go(func() {
		for wr := range wch {
			now := time.Now().UnixNano()
			s.delMu.Lock()
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE {
					if _, ok := s.deleted[string(ev.Kv.Key)]; !ok {
						s.deleted[string(ev.Kv.Key)] = now
					}
				}
			}
			s.delMu.Unlock()
		}
	})
	return func() {
		stopRun()
		bg.Wait()
		stopWatch()
	}
}

// cut lets the holder run quiet for Quiet, cuts it off from etcd for
// Outage, restores the traffic and tells the holder so.
func (s *storm) cut(ctx context.Context) error {
	s.quietStart = time.Now()
	if err := retry.Sleep(ctx, s.cfg.Quiet); err != nil {
		return s.holderFailed("quiet", err)
	}
	s.cutAt = time.Now()
	s.proxy.Blackhole()
	fmt.Fprintf(s.progress, "storm: etcd cut off for %v\n", s.cfg.Outage)
	if err := retry.Sleep(ctx, s.cfg.Outage); err != nil {
		s.proxy.Restore()
		return s.holderFailed("outage", err)
	}
	st, err := ReadServer(nil)
	s.srvMu.Lock()
	s.srvStart, s.srvStartErr = st, err
	s.srvMu.Unlock()
	s.restore = time.Now()
	s.proxy.Restore()
	if _, err := io.WriteString(s.stdin, "restored\n"); err != nil {
		return s.holderFailed("telling it the restore", err)
	}
	fmt.Fprintf(s.progress, "storm: traffic restored; re-acquiring at most %.0f/s (%.2f of the measured request rate; predicted %.1f s)\n", s.res.Rate, s.res.RateShare, s.res.PredictedSeconds)
	return nil
}

// recover waits for the holder process to take every lock again, clean
// up and exit, stops the observers and reads the holder's report.
func (s *storm) recover(stopObserving func()) error {
	werr := <-s.waited
	stopObserving()
	res := &s.res
	res.HolderMaxRSS = s.holder.MaxRSS()
	if werr != nil {
		return fmt.Errorf("storm: holder process: %v: %s", werr, s.holder.Stderr())
	}
	b, err := os.ReadFile(s.reportPath)
	if err != nil {
		return fmt.Errorf("storm: holder process's report: %w", err)
	}
	if err := json.Unmarshal(b, &s.rep); err != nil {
		return fmt.Errorf("storm: holder process's report: %w", err)
	}
	rep := &s.rep
	res.Failures = append(res.Failures, stormFirst(rep.Errors, 5)...)
	res.Attempts, res.FailedAttempts, res.Reheld, res.ScanMax = rep.Attempts, rep.Failed, rep.Reheld, rep.ScanMax
	res.CloseSessionsSeconds, res.CloseMutexesSeconds = rep.CloseSessions.Seconds(), rep.CloseMutexes.Seconds()
	res.Relost, res.RelostCauses, res.RelostSlackMin = rep.Relost, rep.RelostCauses, rep.RelostSlackMin
	s.end = time.Now()
	if rep.AllHeld > 0 {
		s.end = time.Unix(0, rep.AllHeld)
		res.RecoverySeconds = s.end.Sub(s.restore).Seconds()
	} else {
		res.Failures = append(res.Failures, "the locks were never all held again")
	}
	return nil
}

// report makes the checks and the figures of the run, and prints them.
func (s *storm) report(ctx context.Context) error {
	s.serverCost()
	s.losses()
	s.requests()
	s.latencies()
	if err := s.keysLeft(ctx); err != nil {
		return err
	}
	s.print()
	s.res.OK = len(s.res.Failures) == 0
	return nil
}

// serverCost is what the recovery cost the server, per re-acquisition.
func (s *storm) serverCost() {
	res, rep := &s.res, &s.rep
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	switch {
	case s.srvStartErr != nil || s.srvEndErr != nil:
		res.Failures = append(res.Failures, fmt.Sprintf("reading the member's metrics: %v", errors.Join(s.srvStartErr, s.srvEndErr)))
	case s.srvEnd.Events > 0 && rep.Attempts > 0:
		d := s.srvEnd.Sub(s.srvStart)
		res.EventsPerAcquire = d.Events / float64(rep.Attempts)
		res.WatchMessagesPerAcquire = d.WatchMessages / float64(rep.Attempts)
		res.UnaryPerAcquire = d.Unary / float64(rep.Attempts)
	}
}

// losses checks the ends of the first holds against their leases' expiry
// as the client knows it and the server's deletion of their keys.
func (s *storm) losses() {
	res, rep, cfg, cut := &s.res, &s.rep, s.cfg, s.cutAt
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
		if at, ok := s.deleted[l.Key]; ok {
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
}

// requests are the holder's requests: the quiet rate, then the peaks of
// any 1 s and 5 s, against the bound the rate cap implies; and its
// scheduling lag.
func (s *storm) requests() {
	res, rep := &s.res, &s.rep
	cut, restore, end := s.cutAt, s.restore, s.end
	var quietN int64
	for _, w := range rep.Windows {
		if w.At > s.quietStart.UnixNano() && w.At <= cut.UnixNano() {
			quietN += w.N
		}
		switch {
		case w.At > cut.UnixNano() && w.At <= restore.UnixNano():
			res.HolderLagOutage = max(res.HolderLagOutage, w.Lag)
		case w.At > restore.UnixNano() && w.At <= end.UnixNano()+int64(100*time.Millisecond):
			res.HolderLagRecovery = max(res.HolderLagRecovery, w.Lag)
		}
	}
	res.QuietPerSecond = float64(quietN) / cut.Sub(s.quietStart).Seconds()
	res.RequestBound = res.Rate*stormRequestsPerReacquire + res.QuietPerSecond + 4*float64(s.cfg.Sessions)
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
}

// latencies are the probes' percentiles, quiet against the recovery and
// against the raw floor, and the timeline.
func (s *storm) latencies() {
	res, rep := &s.res, &s.rep
	split := func(ps []stormSample) (quiet, rec []time.Duration) {
		for _, p := range ps {
			switch {
			case !p.at.Before(s.quietStart) && p.at.Before(s.cutAt):
				quiet = append(quiet, p.lat)
			case !p.at.Before(s.restore) && !p.at.After(s.end):
				rec = append(rec, p.lat)
			}
		}
		return quiet, rec
	}
	qg, rg := split(s.getProbes)
	qp, rp := split(s.putProbes)
	res.ProbeSamples = [4]int{len(qg), len(rg), len(qp), len(rp)}
	res.QuietGetP50, res.QuietGetP99 = harness.Percentile(qg, 50), harness.Percentile(qg, 99)
	res.RecoveryGetP50, res.RecoveryGetP99 = harness.Percentile(rg, 50), harness.Percentile(rg, 99)
	res.QuietPutP50, res.QuietPutP99 = harness.Percentile(qp, 50), harness.Percentile(qp, 99)
	res.RecoveryPutP50, res.RecoveryPutP99 = harness.Percentile(rp, 50), harness.Percentile(rp, 99)
	if res.QuietGetP99 > 0 && res.RecoveryGetP99 > 5*res.QuietGetP99 {
		res.Failures = append(res.Failures, fmt.Sprintf("Get p99 during recovery %v exceeds 5× the quiet p99 %v", res.RecoveryGetP99, res.QuietGetP99))
	}
	if res.QuietPutP99 > 0 && res.RecoveryPutP99 > 5*res.QuietPutP99 {
		res.Failures = append(res.Failures, fmt.Sprintf("Put p99 during recovery %v exceeds 5× the quiet p99 %v", res.RecoveryPutP99, res.QuietPutP99))
	}
	res.Timeline = stormTimeline(s.cutAt, s.end, rep.Windows, s.getProbes, s.putProbes)
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
		res.FloorGetP99, res.FloorPutP99 = harness.Percentile(within(s.getProbes), 99), harness.Percentile(within(s.putProbes), 99)
		ratio := func(a, b time.Duration) float64 {
			if b <= 0 {
				return 0
			}
			return float64(a) / float64(b)
		}
		res.FloorGetRatio, res.FloorPutRatio = ratio(res.FloorGetP99, res.QuietGetP99), ratio(res.FloorPutP99, res.QuietPutP99)
		res.RecoveryGetRatio, res.RecoveryPutRatio = ratio(res.RecoveryGetP99, res.QuietGetP99), ratio(res.RecoveryPutP99, res.QuietPutP99)
	}
}

// keysLeft checks that the holder's cleanup left no key, baton's or the
// raw floor's.
func (s *storm) keysLeft(ctx context.Context) error {
	left, err := stormKeysLeft(ctx, s.probeCli, stormNamespace)
	if err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	rawLeft, err := stormKeysLeft(ctx, s.probeCli, stormNamespace+"-raw")
	if err != nil {
		return fmt.Errorf("storm: %w", err)
	}
	left = append(left, rawLeft...)
	s.res.KeysLeft = len(left)
	if s.res.KeysLeft != 0 {
		s.res.Failures = append(s.res.Failures, fmt.Sprintf("%d keys left under /%s/ after cleanup, first %q", s.res.KeysLeft, stormNamespace, left[0]))
	}
	return nil
}

// print writes the figures to progress.
func (s *storm) print() {
	res, cfg, progress := &s.res, s.cfg, s.progress
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
		tl[i].GetP99, tl[i].PutP99 = harness.Percentile(gets[i], 99), harness.Percentile(puts[i], 99)
	}
	return tl
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

// countKeysLeft counts the keys left under namespace ns once a phase's
// processes are gone (stormKeysLeft), and adds a failure naming the first
// if there are any.
func countKeysLeft(cli *clientv3.Client, ns string, failures *[]string) (int, error) {
	left, err := stormKeysLeft(context.Background(), cli, ns)
	if err != nil {
		return 0, err
	}
	if len(left) != 0 {
		*failures = append(*failures, fmt.Sprintf("%d keys left under /%s/, first %q", len(left), ns, left[0]))
	}
	return len(left), nil
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

// stormFirst keeps the first n of msgs, saying how many more there were.
func stormFirst(msgs []string, n int) []string {
	if len(msgs) <= n {
		return msgs
	}
	return append(slices.Clone(msgs[:n]), fmt.Sprintf("... and %d more", len(msgs)-n))
}
