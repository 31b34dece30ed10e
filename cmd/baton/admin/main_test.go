package admin_test

import (
	"testing"

	"github.com/batonhq/baton/cmd/baton/cli"
	"github.com/batonhq/baton/cmd/baton/internal/clitest"
)

func TestMain(m *testing.M) { clitest.RunTests(m, cli.Main) }
