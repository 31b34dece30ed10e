package rwmutex_test

import (
	"context"
	"errors"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
	"github.com/batonhq/baton/rwmutex"
)

// Arrival order means that a reader that read-locks again while a writer
// waits queues behind the writer, which waits for the reader's first read
// lock: as with sync.RWMutex, nested read locking deadlocks. The nested
// RLock blocks until its ctx ends and returns ctx's error, leaving no key;
// the first read lock is still held, and the writer acquires once it is
// released.
func TestNestedRLockBehindAWaitingWriterWaitsUntilCtxEnds(t *testing.T) {
	cli := client(t)
	ctx := etcdtest.Context(t, 30*time.Second)
	reader := newRW(t, cli, "nested-rlock")
	writer := newRW(t, client(t), "nested-rlock")
	r1, err := reader.RLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var w *rwmutex.Lock
	go func() {
		var err error
		w, err = writer.Lock(ctx)
		got <- err
	}()
	etcdtest.WaitKeys(t, cli, reader.Prefix(), 2)
	before := etcdtest.Keys(t, cli, reader.Prefix())

	nctx, cancel := context.WithTimeout(ctx, time.Second)
	start := time.Now()
	r2, err := reader.RLock(nctx)
	cancel()
	if err == nil {
		_ = r2.Unlock(ctx)
		t.Fatal("nested RLock behind a waiting writer acquired: a reader passed a writer that came before it")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("nested RLock behind a waiting writer = %v, want ctx's error (DeadlineExceeded)", err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("nested RLock returned after %v, before its ctx ended", d)
	}
	if after := etcdtest.Keys(t, cli, reader.Prefix()); !slices.Equal(after, before) {
		t.Fatalf("keys after the nested RLock gave up = %v, want those before it %v", after, before)
	}
	select {
	case <-r1.Done():
		t.Fatalf("the first read lock ended: %v", context.Cause(r1.Context()))
	case err := <-got:
		t.Fatalf("the writer returned (%v) while the first read lock is held", err)
	default:
	}
	if err := r1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("writer after the read lock was released: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not acquire within 10s of the read lock's release")
	}
	if err := w.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// The rule above is documented, as sync.RWMutex documents it: the package
// doc or RLock's doc says that read-locking again (nested, recursive or
// re-entrant read locking) while a writer waits blocks behind it.
func TestDocStatesTheNestedRLockRule(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	dp, err := doc.NewFromFiles(fset, files, "github.com/batonhq/baton/rwmutex")
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{dp.Doc}
	for _, typ := range dp.Types {
		for _, m := range typ.Methods {
			if m.Name == "RLock" || m.Name == "TryRLock" {
				texts = append(texts, m.Doc)
			}
		}
	}
	rule := regexp.MustCompile(`(?is)(nested|recursive|re-?entrant|read-lock(s|ing)? again|RLock again).{0,400}writer|writer.{0,400}(nested|recursive|re-?entrant|read-lock(s|ing)? again|RLock again)`)
	for _, text := range texts {
		if rule.MatchString(text) {
			return
		}
	}
	t.Fatal("neither the rwmutex package doc nor RLock's doc states that a nested (recursive) RLock by a reader waits behind a waiting writer, and so deadlocks, as sync.RWMutex's doc does")
}
