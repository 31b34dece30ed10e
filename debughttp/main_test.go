package debughttp_test

import (
	"context"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/etcdtest"
)

// srv is the package's one etcd server process.
var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
