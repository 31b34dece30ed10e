package watch

import (
	"testing"

	"github.com/batonhq/baton/integration/etcdtest"
)

var srv *etcdtest.Server

func TestMain(m *testing.M) { etcdtest.Main(m, &srv) }
