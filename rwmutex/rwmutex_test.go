package rwmutex_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/rwmutex"
)

func TestReadersShareWritersExclude(t *testing.T) {
	ctx := etcdtest.Context(t, 20*time.Second)
	a := newRW(t, client(t), "share")
	b := newRW(t, client(t), "share")
	r1, err := a.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.RLock(ctx) // one RWMutex holds several read locks
	if err != nil {
		t.Fatal(err)
	}
	r3, err := b.TryRLock(ctx)
	if err != nil {
		t.Fatalf("TryRLock beside readers: %v", err)
	}
	if !r1.Shared() || r1.Key() == r2.Key() {
		t.Fatalf("read locks %s %s", r1.Key(), r2.Key())
	}
	if _, err := b.TryLock(ctx); !errors.Is(err, rwmutex.ErrLocked) {
		t.Fatalf("TryLock beside readers = %v, want ErrLocked", err)
	}
	got := make(chan *rwmutex.Lock, 1)
	go func() {
		w, err := b.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- w
	}()
	etcdtest.WaitKeys(t, client(t), a.Prefix(), 4)
	// A reader arriving after the waiting writer waits for it.
	if _, err := a.TryRLock(ctx); !errors.Is(err, rwmutex.ErrLocked) {
		t.Fatalf("TryRLock behind a waiting writer = %v, want ErrLocked", err)
	}
	holders, err := a.Holders(ctx)
	if err != nil || len(holders) != 3 {
		t.Fatalf("Holders = %+v, %v; want the 3 readers", holders, err)
	}
	waiters, err := a.Waiters(ctx)
	if err != nil || len(waiters) != 1 || waiters[0].Shared {
		t.Fatalf("Waiters = %+v, %v; want the writer", waiters, err)
	}
	for _, r := range []*rwmutex.Lock{r1, r2} {
		if err := r.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-got:
		t.Fatal("the writer held beside a reader")
	case <-time.After(200 * time.Millisecond):
	}
	if err := r3.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	var w *rwmutex.Lock
	select {
	case w = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("the writer never held after the readers left")
	}
	if w.Shared() || w.Token() <= r3.Token() {
		t.Fatalf("writer token %d, last reader's %d", w.Token(), r3.Token())
	}
	rc := make(chan *rwmutex.Lock, 1)
	go func() {
		r, err := a.RLock(ctx)
		if err != nil {
			t.Error(err)
		}
		rc <- r
	}()
	etcdtest.WaitKeys(t, client(t), a.Prefix(), 2)
	select {
	case <-rc:
		t.Fatal("a reader held beside the writer")
	case <-time.After(200 * time.Millisecond):
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-rc:
		_ = r.Unlock(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the reader never held after the writer left")
	}
}

// TestWriterIsNotStarvedByAStreamOfReaders: readers keep overlapping, so
// the lock is never free of readers; a writer still gets it, promptly, and
// the readers that came after it wait.
func TestWriterIsNotStarvedByAStreamOfReaders(t *testing.T) {
	ctx := etcdtest.Context(t, 30*time.Second)
	rw := newRW(t, client(t), "starve")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var reads atomic.Int64
	var duringWrite atomic.Int64
	var writing atomic.Bool
	for i := range 4 {
		r := newRW(t, client(t), "starve")
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 25 * time.Millisecond) // staggered: always one reading
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := r.RLock(ctx)
				if err != nil {
					return
				}
				reads.Add(1)
				if writing.Load() {
					duringWrite.Add(1)
				}
				time.Sleep(100 * time.Millisecond)
				_ = l.Unlock(ctx)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	w, err := rw.Lock(etcdtest.Context(t, 5*time.Second))
	if err != nil {
		t.Fatalf("writer behind a stream of readers: %v", err)
	}
	writing.Store(true)
	waited := time.Since(start)
	before := reads.Load()
	time.Sleep(300 * time.Millisecond)
	after := reads.Load()
	writing.Store(false)
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	if after != before || duringWrite.Load() != 0 {
		t.Fatalf("%d read locks granted while the writer held", after-before+duringWrite.Load())
	}
	t.Logf("writer waited %v behind 4 overlapping readers (%d reads before it)", waited.Round(time.Millisecond), before)
}

func TestCloseReleasesReadAndWriteLocks(t *testing.T) {
	ctx := etcdtest.Context(t, 10*time.Second)
	rw, err := rwmutex.New(client(t), "close")
	if err != nil {
		t.Fatal(err)
	}
	r, err := rw.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := newRW(t, client(t), "close")
	errc := make(chan error, 1)
	go func() { _, err := rw.Lock(ctx); errc <- err }()
	etcdtest.WaitKeys(t, client(t), rw.Prefix(), 2)
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, rwmutex.ErrClosed) {
		t.Fatalf("waiting Lock after Close = %v, want ErrClosed", err)
	}
	if !errors.Is(context.Cause(r.Context()), rwmutex.ErrReleased) {
		t.Fatalf("read lock's cause after Close = %v", context.Cause(r.Context()))
	}
	etcdtest.WaitKeys(t, client(t), rw.Prefix(), 0)
	w, err := other.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Unlock(ctx)
}
