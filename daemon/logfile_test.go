package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// waitFile waits until the file at path holds want, and returns it.
func waitFile(t *testing.T, path, want string) string {
	t.Helper()
	var b []byte
	sandboxtest.Eventually(t, 60*time.Second, func() error {
		if b, _ = os.ReadFile(path); !strings.Contains(string(b), want) {
			return fmt.Errorf("%s does not say %q:\n%s", path, want, b)
		}
		return nil
	})
	return string(b)
}

// SIGHUP, as logrotate sends it after renaming the log: the server keeps
// running, writes the new file from then on (not the renamed one), and
// re-reads config.yaml at once (log.level changed without waiting for
// the poll).
func TestSIGHUPReopensLog(t *testing.T) {
	in := newInstance(t, "")
	p := in.start()
	log := in.config().LogFile()
	waitFile(t, log, "listening")
	rotated := log + ".1"
	if err := os.Rename(log, rotated); err != nil {
		t.Fatal(err)
	}
	cfg, _ := os.ReadFile(in.config().ConfigFile())
	os.WriteFile(in.config().ConfigFile(), append(cfg, "log: {level: debug}\n"...), 0o600)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFile(t, log, "SIGHUP: log reopened")
	waitFile(t, log, "log.level reloaded")
	if code, _, _ := p.anon().do("GET", "/healthz", nil); code != http.StatusOK {
		t.Fatalf("after SIGHUP: /healthz %d", code)
	}
	old, _ := os.ReadFile(rotated)
	if strings.Contains(string(old), "SIGHUP:") || strings.Contains(string(old), "reloaded from") {
		t.Errorf("the renamed log got lines after SIGHUP:\n%s", old)
	}
}

// log.format json: every line of the log file is one JSON object.
func TestLogFormatJSON(t *testing.T) {
	in := newInstance(t, "log: {format: json}\n")
	p := in.start()
	p.anon().do("GET", "/healthz", nil)
	p.stop()
	b, err := os.ReadFile(in.config().LogFile())
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	n := 0
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec["@message"] == nil {
			t.Fatalf("line %d is not a JSON log record: %q (%v)", n+1, sc.Text(), err)
		}
		n++
	}
	if n < 2 {
		t.Fatalf("%d lines in the log:\n%s", n, b)
	}
}
