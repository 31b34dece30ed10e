package queue_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/batonhq/baton/internal/queue"
)

// Release's mark toggle, kept per namespace (and built per release past
// the bound), names that namespace's marks every time, from any goroutine.
func TestReleaseTogglesTheKeysNamespaceMarks(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 100 { // past the bound of kept namespaces
				ns := fmt.Sprintf("/ns%d/v1/", (i+g)%100)
				for _, alone := range []bool{false, true} {
					ops := queue.Release(ns+"lock/x/1f", true, alone, 7)
					if len(ops) != 2 || string(ops[0].KeyBytes()) != ns+"lock/x/1f" || !ops[0].IsDelete() {
						t.Errorf("%s: ops %v", ns, ops)
						return
					}
					toggle := ops[1]
					if alone {
						cmps, then, els := toggle.Txn()
						if len(cmps) != 1 || string(cmps[0].KeyBytes()) != ns+"lock/x/" || string(cmps[0].GetCompare().GetRangeEnd()) != ns+"lock/x0" ||
							cmps[0].GetCompare().GetCreateRevision() != 8 || len(then) != 0 || len(els) != 1 {
							t.Errorf("%s: alone's condition %v", ns, cmps)
							return
						}
						toggle = els[0]
					}
					cmps, then, els := toggle.Txn()
					if len(cmps) != 1 || string(cmps[0].KeyBytes()) != ns+"released" || len(then) != 2 || len(els) != 2 ||
						string(then[0].KeyBytes()) != ns+"released" || !then[0].IsDelete() || string(then[1].KeyBytes()) != ns+"released-b" || !then[1].IsPut() ||
						string(els[0].KeyBytes()) != ns+"released-b" || !els[0].IsDelete() || string(els[1].KeyBytes()) != ns+"released" || !els[1].IsPut() {
						t.Errorf("%s: toggle %v %v %v", ns, cmps, then, els)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}
