package sandboxkit

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

func TestBuildInternalDescriptors(t *testing.T) {
	p := Policy{Seccomp: testFilter(t)}
	l, err := p.build([]string{"x"}, buildOptions{status: true, reserved: 1, asPid1: true})
	if err != nil {
		t.Fatal(err)
	}
	// fd 3 is the status pipe, fd 4 is reserved, Files start at 5.
	for _, want := range [][]string{
		{"--file", "5", "/etc/passwd"}, {"--file", "6", "/etc/group"},
		{"--seccomp", "7"}, {"--json-status-fd", "3"}, {"--as-pid-1"},
	} {
		if !containsSeq(l.Args, want) {
			t.Errorf("argv lacks %q: %q", want, l.Args)
		}
	}
}

func containsSeq(s, sub []string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if slices.Equal(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// TestConstructors: every Policy Settings makes is built on the strict
// defaults and carries every setting; Workspace needs a workspace, and
// HostView masks the host's data, the caller's extra masks included.
func TestConstructors(t *testing.T) {
	ws := &Workspace{Lower: "/l", Upper: "/u", Work: "/w"}
	lim := DefaultLimits()
	lim.Pids = 77
	launched := 0
	s := Settings{Bwrap: "/opt/bwrap", Seccomp: seccomp.Enforce, Limits: &lim, Launching: func(context.Context, LaunchRecord) error { launched++; return nil }}
	enforce, err := seccomp.Load(seccomp.Enforce)
	if err != nil {
		t.Fatal(err)
	}
	for name, build := range map[string]func() (*Policy, error){
		"new":       func() (*Policy, error) { return s.NewPolicy("new") },
		"workspace": func() (*Policy, error) { return s.Workspace("workspace", ws) },
		"host-view": func() (*Policy, error) { return s.HostView("host-view", nil) },
	} {
		p, err := build()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if p.Bwrap != s.Bwrap || p.Limits != lim || !bytes.Equal(p.Seccomp, enforce.Program) || p.Profile != name || p.UID != os.Getuid() || p.GID != os.Getgid() {
			t.Errorf("%s: a setting is lost: %+v", name, p)
		}
		if err := p.launching(t.Context(), "run", []string{"true"}, ""); err != nil || launched == 0 {
			t.Errorf("%s: Launching not carried (%v)", name, err)
		}
		launched = 0
		l, err := p.build([]string{"true"}, buildOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if slices.Contains(l.Args, "--share-net") {
			t.Errorf("%s shares the network by default", name)
		}
		for _, must := range []string{"--unshare-all", "--disable-userns", "--clearenv", "--die-with-parent", "--new-session", "--seccomp"} {
			if !slices.Contains(l.Args, must) {
				t.Errorf("%s lacks %s", name, must)
			}
		}
		if got := slices.Contains(l.Args, WorkspaceDir); got != (name == "workspace") {
			t.Errorf("%s: workspace mounted = %v", name, got)
		}
	}
	if p, err := (Settings{}).NewPolicy(""); err != nil || p.Limits != DefaultLimits() || p.Seccomp == nil {
		t.Errorf("zero Settings: %v, %+v: want DefaultLimits and the log filter", err, p)
	}
	if _, err := (Settings{Seccomp: "strict"}).NewPolicy(""); err == nil {
		t.Error("an unknown seccomp mode made a Policy")
	}
	if _, err := s.Workspace("workspace", nil); err == nil || !strings.Contains(err.Error(), "needs a workspace") {
		t.Errorf("Workspace(nil) = %v", err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	os.WriteFile(file, []byte("secret"), 0o600)
	p, err := s.HostView("host-view", []string{dir, file, filepath.Join(dir, "missing")})
	if err != nil || !p.HostView {
		t.Fatalf("HostView = %v, %+v", err, p)
	}
	for _, m := range []string{"/home", "/root", "/var/lib", dir} {
		if !slices.Contains(p.Tmpfs, m) {
			t.Errorf("host view does not mask %s", m)
		}
	}
	if !slices.Contains(p.ReadOnly, Bind{Src: "/dev/null", Dst: file}) || slices.Contains(p.Tmpfs, file) {
		t.Errorf("a masked file is not behind /dev/null: %v %v", p.ReadOnly, p.Tmpfs)
	}
	if slices.Contains(p.Tmpfs, filepath.Join(dir, "missing")) {
		t.Errorf("a missing path is masked (bwrap cannot make its mount point in a read-only view): %v", p.Tmpfs)
	}
}

// netPolicy is the strict Policy under s, with the host network if
// share: the shape of a long-lived tool server's sandbox.
func netPolicy(s Settings, share bool) (*Policy, error) {
	p, err := s.NewPolicy("net")
	if err == nil {
		p.ShareNet = share
	}
	return p, err
}

// mirrorPolicy is the strict Policy under s with ro read-only at
// /mirror and rw read-write at /out, the working directory: the shape of
// a git checkout's sandbox.
func mirrorPolicy(s Settings, ro, rw string) (*Policy, error) {
	p, err := s.NewPolicy("mirror")
	if err == nil {
		p.ReadOnly = []Bind{{Src: ro, Dst: "/mirror"}}
		p.ReadWrite = []Bind{{Src: rw, Dst: "/out"}}
		p.Dir = "/out"
	}
	return p, err
}

// TestEgressOptions: Settings.Egress carries the caps and the resolver.
func TestEgressOptions(t *testing.T) {
	caps := egress.Caps{MaxConns: 3, MaxBytes: 5, MaxConnDuration: time.Second, DialTimeout: time.Millisecond}
	res := &net.Resolver{}
	o := Settings{EgressCaps: caps, EgressResolver: res}.Egress([]string{"a.test"})
	if o.Caps != caps || o.Resolver != res || !slices.Equal(o.Allow, []string{"a.test"}) || o.OnEvent != nil {
		t.Errorf("Egress = %+v", o)
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, tt := range []struct {
		v    string
		want bool
	}{{"0.12.0", true}, {"0.12.1", true}, {"0.13", true}, {"1.0.0", true}, {"0.11.9", false}, {"0.8.0", false}, {"0.12", true}, {"0.9.99", false}} {
		if got := versionAtLeast(tt.v, "0.12.0"); got != tt.want {
			t.Errorf("versionAtLeast(%q) = %v", tt.v, got)
		}
	}
}

func TestUsernsRemedy(t *testing.T) {
	tests := []struct {
		name   string
		sysctl fstest.MapFS
		want   string
	}{
		{"apparmor", fstest.MapFS{
			"kernel/apparmor_restrict_unprivileged_userns": {Data: []byte("1\n")},
			"user/max_user_namespaces":                     {Data: []byte("15000\n")},
		}, "bwrap-userns-restrict"},
		{"apparmor allows", fstest.MapFS{
			"kernel/apparmor_restrict_unprivileged_userns": {Data: []byte("0\n")},
			"user/max_user_namespaces":                     {Data: []byte("0\n")},
		}, "user.max_user_namespaces=0"},
		{"debian clone sysctl", fstest.MapFS{
			"kernel/unprivileged_userns_clone": {Data: []byte("0\n")},
		}, "kernel.unprivileged_userns_clone=1"},
		{"nothing known", fstest.MapFS{}, "seccomp profile that allows"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := usernsRemedy(tt.sysctl); !strings.Contains(got, tt.want) {
				t.Errorf("remedy %q lacks %q", got, tt.want)
			}
		})
	}
}

// testFilter is a real, valid filter program.
func testFilter(t testing.TB) []byte {
	t.Helper()
	f, err := seccomp.Load(seccomp.Enforce)
	if err != nil {
		t.Fatal(err)
	}
	return f.Program
}
