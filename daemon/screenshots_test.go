package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Screenshots of the web UI's pages are the tests' artifacts: a person
// reviews them, a test only writes them.

// screenshotSizes are the viewports every page is checked and shot at:
// a desktop and a phone.
var screenshotSizes = [][2]int64{{1280, 800}, {390, 844}}

var screenshotDirs sync.Map // top-level test name -> directory

// screenshot saves what ctx's tab shows as name-WxH.png (WxH its
// viewport) in the test's screenshot directory (artifactDir). The
// directory is logged once.
func screenshot(t testing.TB, ctx context.Context, name string) {
	t.Helper()
	dir := screenshotDir(t)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	size, err := chromedp.Run(cctx, chromedp.Evaluate[[2]int64]("[innerWidth, innerHeight]"))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	shot, err := chromedp.Run(cctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%dx%d.png", name, size[0], size[1])), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}

// screenshotDir is the directory of t's top-level test: its subtests'
// screenshots go there too.
func screenshotDir(t testing.TB) string {
	t.Helper()
	top, _, _ := strings.Cut(t.Name(), "/")
	if d, ok := screenshotDirs.Load(top); ok {
		if _, err := os.Stat(d.(string)); err == nil {
			return d.(string)
		}
		// An earlier run's (go test -count): removed when it ended.
		screenshotDirs.CompareAndDelete(top, d)
	}
	d := artifactDir(t)
	d0, loaded := screenshotDirs.LoadOrStore(top, d)
	if !loaded {
		t.Logf("screenshots in %s", d)
	}
	return d0.(string)
}

// artifactDir is where screenshots go: $CODUMENTOR_TEST_ARTIFACTS/webui
// when set, else the test's artifact directory (go test -artifacts
// keeps it under -outputdir).
func artifactDir(t testing.TB) string {
	if d := os.Getenv("CODUMENTOR_TEST_ARTIFACTS"); d != "" {
		d = filepath.Join(d, "webui")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}
