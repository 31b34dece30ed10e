package harness

import (
	"fmt"
	"runtime"
	"sort"
	"sync"
	"time"
)

// MeterPeriod is how often a Meter's goroutine asks to wake up.
const MeterPeriod = 10 * time.Millisecond

// StallMin is the least lateness a Meter records as a stall: a loaded but
// fair machine, with the race detector, wakes a sleeper within a few
// milliseconds.
const StallMin = 20 * time.Millisecond

// Stall is one wake-up of a Meter's goroutine that came late: from At,
// when it was due, for Late. Meanwhile this process (or at least that
// goroutine) was not run: the machine was starved of CPU, or the process
// of its own threads.
type Stall struct {
	At   int64         `json:"at"`
	Late time.Duration `json:"late_ns"`
}

// End is when the late wake-up came.
func (s Stall) End() int64 { return s.At + int64(s.Late) }

// Meter measures this process's scheduling delay as it runs: a goroutine
// sleeps MeterPeriod again and again, on clock (nanoseconds), and records
// each wake-up late by StallMin or more. What a run measured while the
// meter saw it starved is not a result about the code it ran.
type Meter struct {
	clock   func() int64
	onStall func(Stall)
	stop    chan struct{}
	done    chan struct{}

	mu     sync.Mutex
	start  int64
	end    int64
	ticks  int
	lates  []time.Duration // every wake-up's lateness, for the quantiles
	stalls []Stall
}

// StartMeter starts a Meter on clock (nil: time.Now().UnixNano()).
func StartMeter(clock func() int64) *Meter { return StartMeterNotify(clock, nil) }

// StartMeterNotify is StartMeter, and calls onStall (if not nil) with each
// stall as it is recorded, from the meter's goroutine: a child process
// tells its parent.
func StartMeterNotify(clock func() int64, onStall func(Stall)) *Meter {
	if clock == nil {
		clock = func() int64 { return time.Now().UnixNano() }
	}
	m := &Meter{clock: clock, onStall: onStall, stop: make(chan struct{}), done: make(chan struct{}), start: clock()}
	go m.run()
	return m
}

func (m *Meter) run() {
	defer close(m.done)
	t := time.NewTimer(MeterPeriod)
	defer t.Stop()
	due := m.clock() + int64(MeterPeriod)
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		at := m.clock()
		late := time.Duration(max(0, at-due))
		m.mu.Lock()
		m.ticks++
		if len(m.lates) < 1<<20 {
			m.lates = append(m.lates, late)
		}
		st := Stall{At: due, Late: late}
		if late >= StallMin {
			m.stalls = append(m.stalls, st)
		}
		m.mu.Unlock()
		if late >= StallMin && m.onStall != nil {
			m.onStall(st)
		}
		due = m.clock() + int64(MeterPeriod)
		t.Reset(MeterPeriod)
	}
}

// Stop stops the meter and waits for its goroutine. Idempotent.
func (m *Meter) Stop() {
	m.mu.Lock()
	if m.end != 0 {
		m.mu.Unlock()
		return
	}
	m.end = m.clock()
	m.mu.Unlock()
	close(m.stop)
	<-m.done
}

// Stalls returns the stalls recorded so far.
func (m *Meter) Stalls() []Stall {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Stall(nil), m.stalls...)
}

// Starvation sums up a meter's readings.
func (m *Meter) Starvation() Starvation {
	m.mu.Lock()
	defer m.mu.Unlock()
	end := m.end
	if end == 0 {
		end = m.clock()
	}
	s := Starvation{Span: time.Duration(end - m.start), Ticks: m.ticks, Stalls: len(m.stalls), CPUs: runtime.NumCPU()}
	for _, st := range m.stalls {
		s.Lost += st.Late
		s.Max = max(s.Max, st.Late)
	}
	if len(m.lates) > 0 {
		l := append([]time.Duration(nil), m.lates...)
		sort.Slice(l, func(i, j int) bool { return l[i] < l[j] })
		s.P99 = l[min(len(l)-1, len(l)*99/100)]
	}
	return s
}

// Starvation is what a Meter saw over Span: how many wake-ups (Ticks),
// how many came StallMin late or more (Stalls), the time lost in those
// (Lost), the longest (Max) and the 99th percentile of every wake-up's
// lateness (P99).
type Starvation struct {
	Span   time.Duration `json:"span_ns"`
	Ticks  int           `json:"ticks"`
	Stalls int           `json:"stalls"`
	Lost   time.Duration `json:"lost_ns"`
	Max    time.Duration `json:"max_ns"`
	P99    time.Duration `json:"p99_ns"`
	CPUs   int           `json:"cpus"`
}

// Share is the part of Span lost to stalls.
func (s Starvation) Share() float64 {
	if s.Span <= 0 {
		return 0
	}
	return float64(s.Lost) / float64(s.Span)
}

// StarvedIf is when a run counts as starved: more than Share of its time
// lost to stalls, or one stall longer than Max.
type StarvedIf struct {
	Share float64
	Max   time.Duration
}

// Starved reports whether s passes either limit of l.
func (s Starvation) Starved(l StarvedIf) bool {
	return s.Share() > l.Share || s.Max > l.Max
}

// String is one line: the stalls, the time lost and the longest.
func (s Starvation) String() string {
	return fmt.Sprintf("%d of %d wake-ups %v late or more, %v lost (%.1f%% of %v), longest %v, p99 %v",
		s.Stalls, s.Ticks, StallMin, s.Lost.Round(time.Millisecond), 100*s.Share(), s.Span.Round(time.Second),
		s.Max.Round(time.Millisecond), s.P99.Round(time.Millisecond))
}

// Within is what stalls say of [from, to]: the stalls that overlap it,
// the time lost to them within it, the longest (P99 and Ticks unknown).
func Within(stalls []Stall, from, to int64) Starvation {
	s := Starvation{Span: time.Duration(to - from), CPUs: runtime.NumCPU()}
	i := sort.Search(len(stalls), func(i int) bool { return stalls[i].End() > from })
	for ; i < len(stalls) && stalls[i].At < to; i++ {
		d := time.Duration(min(to, stalls[i].End()) - max(from, stalls[i].At))
		s.Stalls++
		s.Lost += d
		s.Max = max(s.Max, d)
	}
	return s
}

// Stalled is the time lost to stalls within [from, to]: each stall's
// overlap with it. stalls are sorted by At.
func Stalled(stalls []Stall, from, to int64) time.Duration {
	var d time.Duration
	i := sort.Search(len(stalls), func(i int) bool { return stalls[i].End() > from })
	for ; i < len(stalls) && stalls[i].At < to; i++ {
		d += time.Duration(min(to, stalls[i].End()) - max(from, stalls[i].At))
	}
	return d
}
