package sandboxkit

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestHostSockets(t *testing.T) {
	root := t.TempDir()
	mk := func(p string, mode os.FileMode) string {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	listen := func(p string) string {
		l, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return p
	}
	a := mk("a/deep/er", 0o755)
	want := listen(filepath.Join(a, "svc.sock"))
	listen(filepath.Join(mk("masked", 0o755), "hidden.sock"))
	os.WriteFile(filepath.Join(root, "a", "file"), nil, 0o644)
	noRead := mk("noread", 0o311)
	t.Cleanup(func() { os.Chmod(noRead, 0o755) })

	socks, masks := hostSockets(root, []string{filepath.Join(root, "masked")}, 1000)
	if !slices.Equal(socks, []string{want}) {
		t.Errorf("sockets = %q, want %q (the masked dir's is not needed)", socks, want)
	}
	if os.Geteuid() != 0 && !slices.Equal(masks, []string{noRead}) {
		t.Errorf("masks = %q, want the unreadable traversable dir %s", masks, noRead)
	}
	// Out of budget: what was not read is masked, not trusted.
	_, masks = hostSockets(root, nil, 3)
	if !slices.Contains(masks, filepath.Join(root, "a")) {
		t.Errorf("budget exhausted, masks = %q; want the unscanned dirs", masks)
	}
}

// TestHostReadOnlyView runs commands in the host-readonly profile: the
// host's files are readable, the service user's home, the masked dirs and
// a UNIX socket under /run are not, and nothing can be written.
func TestHostReadOnlyView(t *testing.T) {
	requireSandbox(t)
	sockPath := fmt.Sprintf("/run/lock/sandboxkit-test-%d.sock", os.Getpid())
	l, err := net.Listen("unix", sockPath)
	if err != nil {
		sandboxtest.SkipOrFail(t, "cannot create a socket under /run (the world-writable /run/lock): %v", err)
	}
	defer l.Close()
	secretDir := t.TempDir()
	home, _ := os.UserHomeDir()
	// /usr/share/doc stands for an instance directory outside the
	// profile's own masks (e.g. under /opt): readable on the host, so
	// only the Mask hides it.
	exposed := "/usr/share/doc"
	if ents, err := os.ReadDir(exposed); err != nil || len(ents) == 0 {
		t.Fatalf("%s is not a readable, non-empty directory here: %v", exposed, err)
	}
	// A masked file (a configuration, a key) cannot be read, also
	// through a symlink to it (Debian's /etc/os-release is one).
	file := "/etc/os-release"
	real, _ := filepath.EvalSymlinks(file)
	content, err := os.ReadFile(file)
	if err != nil || !bytes.Contains(content, []byte("ID=")) {
		t.Fatalf("%s is not a readable os-release file here: %v", file, err)
	}
	p, err := Settings{}.HostView("host-readonly", []string{secretDir, exposed, file})
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.ReadFile("/etc/hostname")
	run := func(script string) (string, error) {
		var out bytes.Buffer
		c := Command(context.Background(), p, "sh", "-c", script)
		c.Stdout, c.Stderr = &out, &out
		err := c.Run()
		return out.String(), err
	}
	if out, err := run("cat /etc/hostname"); err != nil || out != string(host) {
		t.Errorf("/etc/hostname in the view: %q, %v; want %q", out, err, host)
	}
	out, _ := run(`python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.connect("` + sockPath + `"); print("CONNECTED")' 2>&1`)
	if strings.Contains(out, "CONNECTED") {
		t.Errorf("the sandbox reached a host UNIX socket under /run")
	}
	for _, f := range []string{file, real} {
		if out, err := run("cat " + f); err == nil || strings.Contains(out, "ID=") {
			t.Errorf("a masked file in the view: cat %s: %q %v; want it unreadable", f, out, err)
		}
	}
	for _, d := range []string{home, secretDir, exposed, "/root"} {
		if out, _ := run("ls -A " + d + " 2>/dev/null"); strings.TrimSpace(out) != "" {
			t.Errorf("%s is visible in the view: %q", d, out)
		}
	}
	for _, f := range []string{"/etc/sandboxkit-probe", "/usr/sandboxkit-probe", "/var/log/sandboxkit-probe", "/tmp/probe", homeDir + "/probe", "/dev/shm/probe", home + "/probe", "/run/probe"} {
		if out, err := run("echo x > " + f + " && echo WROTE"); strings.Contains(out, "WROTE") {
			t.Errorf("wrote %s in the read-only view (%v)", f, err)
		}
	}
	if out, err := run("echo x >/dev/null && echo ok"); err != nil || !strings.Contains(out, "ok") {
		t.Errorf("/dev/null is not writable: %q %v", out, err)
	}
}
