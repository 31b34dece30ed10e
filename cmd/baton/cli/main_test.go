package cli

import (
	"testing"

	"github.com/batonhq/baton/cmd/baton/internal/clitest"
)

func TestMain(m *testing.M) { clitest.RunTests(m, Main) }
