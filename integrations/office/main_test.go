package office

import (
	"os"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
)

func TestMain(m *testing.M) {
	// The test binary is the spawner and the office worker too.
	sandboxkit.Main()
	WorkerMain()
	os.Exit(m.Run())
}
