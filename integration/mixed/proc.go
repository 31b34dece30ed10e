package mixed

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/batonhq/baton/integration/robustness"
	"github.com/batonhq/baton/internal/embedetcd/cluster"
)

// Build is one side of the run: a baton CLI and a worker built from one
// commit.
type Build struct {
	Label  string // "old" or "new": the first part of its clients' names
	Commit string // what it was built from, for the report
	Baton  string // the baton CLI
	Worker string // the worker program (package worker)
}

// message is a worker's report line (robustness's child protocol).
type message struct {
	T     string
	Op    *robustness.Op
	Hold  *robustness.Hold
	Reg   *robustness.RegOp
	Key   string
	Token int64
	At    int64
	Cause string
	ID    int64
}

// record is what every process reported, on the shared clock.
type record struct {
	mu      sync.Mutex
	ops     []robustness.Op
	holds   []*robustness.Hold
	regs    []robustness.RegOp
	faults  []robustness.Fault
	disturb []robustness.Disturbance
	probes  []robustness.Probe
	// freezes are the frozen processes' holds to mark, judged after the
	// run: every hold of the process acquired before it ran again.
	freezes []freeze
}

type freeze struct {
	proc       *proc
	start, end int64
}

func (r *record) fault(f robustness.Fault) {
	r.mu.Lock()
	r.faults = append(r.faults, f)
	r.mu.Unlock()
}

// proc is one worker process, or one run of `baton lock` with a worker as
// its command.
type proc struct {
	b     Build
	id    int
	lanes string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	part  *cluster.Partition // its client's proxies: nil for a CLI run
	done  chan struct{}
	rec   *record

	mu      sync.Mutex
	holds   map[string]*robustness.Hold // by key/token
	current map[*robustness.Hold]bool   // not known to have ended
	stopped bool                        // SIGSTOPped
	// asking: a freeze waits for the process's report that it stops
	// itself at a freeze point (SIGUSR1), which froze receives, with the
	// time it stopped; a report with none waiting came too late, and the
	// process is resumed (resumeLate).
	asking bool
	froze  chan int64
	stderr limited
}

func (p *proc) String() string {
	if p.lanes == "" {
		return fmt.Sprintf("%s cli%d", p.b.Label, p.id)
	}
	return fmt.Sprintf("%s p%d (%s)", p.b.Label, p.id, p.lanes)
}

func newProc(b Build, id int, lanes string, rec *record) *proc {
	return &proc{b: b, id: id, lanes: lanes, rec: rec, done: make(chan struct{}), froze: make(chan int64, 1),
		holds: map[string]*robustness.Hold{}, current: map[*robustness.Hold]bool{}, stderr: limited{n: 4096}}
}

// startWorker starts a worker process with its lanes, behind proxies of
// its own.
func startWorker(b Build, id int, lanes string, c *cluster.Cluster, ns string, ttl time.Duration, seed uint64, rec *record) (*proc, error) {
	part, eps, err := cluster.NewPartition(c.Endpoints())
	if err != nil {
		return nil, err
	}
	p := newProc(b, id, lanes, rec)
	p.part = part
	p.cmd = exec.Command(b.Worker, "-build", b.Label, "-id", strconv.Itoa(id), "-endpoints", strings.Join(eps, ","),
		"-namespace", ns, "-ttl", ttl.String(), "-lanes", lanes, "-seed", strconv.FormatUint(seed, 10), "-max", "10m")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = &p.stderr
	out, err := p.cmd.StdoutPipe()
	if err == nil {
		p.stdin, err = p.cmd.StdinPipe()
	}
	if err == nil {
		err = p.cmd.Start()
	}
	if err != nil {
		part.Close()
		return nil, fmt.Errorf("start %s: %w", p, err)
	}
	go func() {
		defer close(p.done)
		p.read(out)
		_ = p.cmd.Wait()
	}()
	return p, nil
}

// read takes the process's messages into the record until EOF; a
// register write announced without its answer (the process was killed
// in between) has an unknown outcome, which may have applied.
func (p *proc) read(out io.Reader) {
	pending := map[int64]robustness.RegOp{}
	defer func() {
		p.rec.mu.Lock()
		for _, r := range pending {
			p.rec.regs = append(p.rec.regs, r)
		}
		p.rec.mu.Unlock()
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.T == "" {
			continue // the CLI's own output
		}
		switch m.T {
		case "op":
			p.rec.mu.Lock()
			p.rec.ops = append(p.rec.ops, *m.Op)
			p.rec.mu.Unlock()
			if strings.HasSuffix(m.Op.Kind, ".Release") || strings.HasPrefix(m.Op.Kind, "election.Resign") || strings.HasPrefix(m.Op.Kind, "election.Transfer") {
				p.mu.Lock()
				if x := p.holds[m.Op.Key+"/"+strconv.FormatInt(m.Op.Token, 10)]; x != nil {
					delete(p.current, x)
				}
				p.mu.Unlock()
			}
		case "freezing":
			p.mu.Lock()
			if p.asking {
				select {
				case p.froze <- m.At:
				default:
				}
			} else {
				go p.resumeLate()
			}
			p.mu.Unlock()
		case "regcall":
			pending[m.ID] = *m.Reg
		case "reg":
			delete(pending, m.ID)
			p.rec.mu.Lock()
			p.rec.regs = append(p.rec.regs, *m.Reg)
			p.rec.mu.Unlock()
		case "hold":
			p.mu.Lock()
			p.holds[m.Hold.Key+"/"+strconv.FormatInt(m.Hold.Token, 10)] = m.Hold
			p.current[m.Hold] = true
			p.mu.Unlock()
			p.rec.mu.Lock()
			p.rec.holds = append(p.rec.holds, m.Hold)
			p.rec.mu.Unlock()
		case "ended":
			p.mu.Lock()
			x := p.holds[m.Key+"/"+strconv.FormatInt(m.Token, 10)]
			if x != nil {
				delete(p.current, x)
			}
			p.mu.Unlock()
			if x != nil {
				p.rec.mu.Lock()
				x.Ended, x.Cause = m.At, m.Cause
				p.rec.mu.Unlock()
			}
		}
	}
}

// holding reports whether the process holds something now.
func (p *proc) holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.current) > 0 && !p.stopped
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) signal(s syscall.Signal) error {
	if p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	return p.cmd.Process.Signal(s)
}

// resumeLate resumes a process that stopped itself for a freeze request
// the test no longer waited for (it reports before it stops): once it is
// stopped, within 5 s of the end of a freeze the runner holds it in (a
// stop from outside, which is the runner's to end: its SIGCONT, the stop
// of its own that may follow it this one's). At most a minute.
func (p *proc) resumeLate() {
	end := time.Now().Add(time.Minute)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && time.Now().Before(end) && p.alive(); time.Sleep(5 * time.Millisecond) {
		p.mu.Lock()
		held := p.stopped
		p.mu.Unlock()
		if held {
			deadline = time.Now().Add(5 * time.Second)
			continue
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)); err == nil && stoppedStat(stat) {
			_ = p.signal(syscall.SIGCONT)
			return
		}
	}
}

// stoppedStat reports whether /proc/PID/stat says the process is stopped
// (state T, after the command's name in parentheses).
func stoppedStat(stat []byte) bool {
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'T'
}

// stop asks the worker to stop (its stdin closes), lets it release what
// it holds, and kills it after a while.
func (p *proc) stop(wait time.Duration) {
	p.mu.Lock()
	if p.stopped {
		p.stopped = false
		_ = p.signal(syscall.SIGCONT)
	}
	p.mu.Unlock()
	if p.stdin != nil {
		_ = p.stdin.Close()
	}
	select {
	case <-p.done:
	case <-time.After(wait):
		_ = p.signal(syscall.SIGKILL)
		<-p.done
	}
	if p.part != nil {
		p.part.Close()
	}
}

// limited keeps the first n bytes written to it.
type limited struct {
	mu sync.Mutex
	b  strings.Builder
	n  int
}

func (l *limited) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if k := min(len(p), l.n); k > 0 {
		l.b.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

func (l *limited) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
