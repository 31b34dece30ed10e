package harness

import (
	"fmt"
	"os"
	"time"
)

// FdatasyncFloor writes 4 KiB at the start of a temp file in dir and
// fdatasyncs it n times: the least a write that etcd acknowledges can cost
// on this disk. It returns every sync's duration.
func FdatasyncFloor(dir string, n int) ([]time.Duration, error) {
	f, err := os.CreateTemp(dir, "fsync-floor-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i)
	}
	out := make([]time.Duration, 0, n)
	for i := range n {
		buf[0] = byte(i)
		start := time.Now()
		if _, err := f.WriteAt(buf, 0); err != nil {
			return nil, err
		}
		if err := datasync(f); err != nil {
			return nil, fmt.Errorf("fdatasync: %w", err)
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// Floor is the disk's fdatasync floor, in milliseconds: the p50 and p99
// of 200 syncs.
type Floor struct {
	P50ms float64 `json:"p50_ms"`
	P99ms float64 `json:"p99_ms"`
}

// MeasureFloor measures the floor in dir (an etcd member's data
// directory, so that it is the member's disk).
func MeasureFloor(dir string) (Floor, error) {
	ds, err := FdatasyncFloor(dir, 200)
	if err != nil {
		return Floor{}, err
	}
	return Floor{P50ms: Ms(Percentile(ds, 50)), P99ms: Ms(Percentile(ds, 99))}, nil
}
