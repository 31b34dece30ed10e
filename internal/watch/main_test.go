package watch

import (
	"testing"

	"github.com/batonhq/baton/internal/etcdtest"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }
