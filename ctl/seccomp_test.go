package ctl_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// damagedCtl builds codumentorctl with this architecture's enforce blob
// replaced by damage(blob) (nil: removed), and the manifest by
// manifest(old manifest, new blob) when set, through go build -overlay.
func damagedCtl(t *testing.T, damage func([]byte) []byte, manifest func(m, blob []byte) []byte) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", "github.com/codumentor/codumentor/sandboxkit/seccomp").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	blobs := filepath.Join(strings.TrimSpace(string(out)), "blobs")
	name := filepath.Join(blobs, runtime.GOARCH+".enforce.bpf")
	blob, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	replace := map[string]string{name: ""}
	if bad := damage(blob); bad != nil {
		replace[name] = filepath.Join(dir, "blob")
		if err := os.WriteFile(replace[name], bad, 0o644); err != nil {
			t.Fatal(err)
		}
		if manifest != nil {
			sums := filepath.Join(blobs, "SHA256SUMS")
			m, err := os.ReadFile(sums)
			if err != nil {
				t.Fatal(err)
			}
			replace[sums] = filepath.Join(dir, "sums")
			if err := os.WriteFile(replace[sums], manifest(m, bad), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ov, _ := json.Marshal(map[string]any{"Replace": replace})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), ov, 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "codumentorctl")
	build := exec.Command("go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", bin, "github.com/codumentor/codumentor/ctl/codumentorctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a damaged codumentorctl: %v\n%s", err, out)
	}
	return bin
}

// A binary whose filter blob was damaged or removed refuses to run
// anything under enforce, with the seccomp check and its remedy; with
// the filter off, the same binary runs commands (so the refusal is the
// filter's doing, not a broken build).
func TestExecDamagedFilterFailsClosed(t *testing.T) {
	requireSandbox(t)
	for _, c := range []struct {
		name     string
		damage   func([]byte) []byte
		manifest func(m, blob []byte) []byte
		says     string
	}{
		{"bit flipped", func(b []byte) []byte { b = bytes.Clone(b); b[20] ^= 1; return b }, nil, "does not match the manifest"},
		{"truncated, manifest updated", func(b []byte) []byte { return b[:len(b)-3] },
			func(m, blob []byte) []byte {
				old := strings.Fields(strings.Split(string(m), runtime.GOARCH+".enforce.bpf")[0])
				return bytes.Replace(m, []byte(old[len(old)-1]), fmt.Appendf(nil, "%x", sha256.Sum256(blob)), 1)
			}, "not a whole number of 8-byte instructions"},
		{"missing", func([]byte) []byte { return nil }, nil, "no filter exists for this architecture"},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := damagedCtl(t, c.damage, c.manifest)
			tc := failClosed{name: c.name, bin: bin, args: []string{"--seccomp", "enforce"}, check: "seccomp: ", remedy: "rebuild the program from an unmodified source tree"}
			assertFailsClosed(t, tc)
			if r := (run{bin: bin, args: []string{"sandbox", "exec", "--seccomp", "enforce", "--", "true"}}).do(t); !strings.Contains(r.stderr, c.says) {
				t.Errorf("the error does not say %q: %v", c.says, r)
			}
			if r := (run{bin: bin, args: []string{"sandbox", "exec", "--seccomp", "off", "--", "echo", "ran"}}).do(t); r.code != 0 || r.stdout != "ran\n" {
				t.Errorf("with the filter off the damaged binary should run commands: %v", r)
			}
			if r := (run{bin: bin, args: []string{"check"}}).do(t); r.code != 1 || !strings.Contains(r.stdout, "seccomp ") || !strings.Contains(r.stdout, c.says) {
				t.Errorf("check should fail its seccomp row: %v", r)
			}
		})
	}
}

// The probe matrix, through the command: all-pass here, under each mode.
func TestCheckProbe(t *testing.T) {
	requireSandbox(t)
	r := ctl(t, "check", "--probe", "--workspace-base", t.TempDir())
	if r.code != 0 || !strings.Contains(r.stdout, "probe: every call behaved as its mode promises") {
		t.Fatalf("want an all-pass matrix: %v", r)
	}
	for _, want := range []string{"CALL", "OFF", "LOG", "ENFORCE", "unshare(~0)", "refused EPERM", "socket(1<<32|AF_ALG, bad flag)", "ioctl(-1, 1<<32|TIOCSTI)", "getpid through x32", "go build", "cc hello.c with a thread", "git init and commit",
		"socketpair(AF_VSOCK, bad flag, 0, NULL)", "refused EAFNOSUPPORT", "open_tree_attr(", "modify_ldt(", "ioctl(-1, TIOCSETD)", "prctl(PR_SET_MM, 0xffff)",
		"first unreviewed number", "personality(PER_LINUX32) and back", "python multiprocessing and asyncio", "node child_process and workers",
		"host abstract UNIX socket out of reach (shared network)"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("matrix lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "FAIL") {
		t.Errorf("a cell failed:\n%s", r.stdout)
	}

	r = ctl(t, "check", "--probe", "--json", "--workspace-base", t.TempDir())
	var rep struct {
		OK    bool `json:"ok"`
		Probe struct {
			Modes    map[string]struct{ Calls []struct{ Reached bool } } `json:"modes"`
			Failures []string                                            `json:"failures"`
		} `json:"probe"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || !rep.OK || len(rep.Probe.Failures) != 0 || len(rep.Probe.Modes) != 3 {
		t.Fatalf("JSON report: %v %+v\n%v", err, rep, r)
	}
	for _, c := range rep.Probe.Modes["enforce"].Calls {
		if c.Reached {
			t.Errorf("a call passed enforce: %+v", c)
		}
	}
}
