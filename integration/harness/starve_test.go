package harness

import (
	"os/exec"
	"testing"
	"time"
)

func TestStalledCountsTheOverlapOfEachStall(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	stalls := []Stall{{At: ms(100), Late: 50 * time.Millisecond}, {At: ms(300), Late: 200 * time.Millisecond}, {At: ms(900), Late: 30 * time.Millisecond}}
	for _, c := range []struct {
		from, to int64
		want     time.Duration
	}{
		{ms(0), ms(1000), 280 * time.Millisecond},
		{ms(120), ms(400), 130 * time.Millisecond}, // 30 of the first, 100 of the second
		{ms(600), ms(900), 0},
		{ms(910), ms(915), 5 * time.Millisecond},
	} {
		if got := Stalled(stalls, c.from, c.to); got != c.want {
			t.Errorf("Stalled(%v, %v) = %v, want %v", time.Duration(c.from), time.Duration(c.to), got, c.want)
		}
	}
}

// A process that is not run for 300 ms (stopped by a shell it started,
// with SIGSTOP, then resumed) shows as a stall of about that.
func TestMeterSeesAProcessThatIsNotRun(t *testing.T) {
	m := StartMeter(nil)
	time.Sleep(50 * time.Millisecond)
	if out, err := exec.Command("sh", "-c", "kill -STOP $PPID; sleep 0.3; kill -CONT $PPID").CombinedOutput(); err != nil {
		t.Fatalf("stop this process: %v %s", err, out)
	}
	time.Sleep(50 * time.Millisecond)
	m.Stop()
	s := m.Starvation()
	if s.Max < 250*time.Millisecond || s.Stalls == 0 {
		t.Fatalf("a crowded process seen as %v", s)
	}
	if !s.Starved(StarvedIf{Share: 0.9, Max: 200 * time.Millisecond}) || s.Starved(StarvedIf{Share: 0.9, Max: time.Second}) {
		t.Errorf("Starved limits misjudged %v", s)
	}
}
