package diag

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// The argv a Policy turns into, exactly: every option bwrap gets, in
// order. sandboxkit's Run and Session start this same argv (through the
// spawner, with the options in an inherited file).

const (
	homeDir     = "/home/sandbox"
	defaultPath = "/usr/local/bin:/usr/bin:/bin"
)

// etcFiles are the /etc entries every sandbox without HostView sees,
// read-only: a curated list, never the whole /etc.
var etcFiles = []string{
	"/etc/alternatives",
	"/etc/ca-certificates",
	"/etc/ca-certificates.conf",
	"/etc/debian_version",
	"/etc/gitconfig",
	"/etc/host.conf",
	"/etc/hosts",
	"/etc/inputrc",
	"/etc/ld.so.cache",
	"/etc/ld.so.conf",
	"/etc/ld.so.conf.d",
	"/etc/locale.alias",
	"/etc/localtime",
	"/etc/mime.types",
	"/etc/nsswitch.conf",
	"/etc/os-release",
	"/etc/protocols",
	"/etc/services",
	"/etc/ssl/certs",
	"/etc/ssl/openssl.cnf",
	"/etc/timezone",
}

// base is the argv prefix every non-HostView policy starts with.
var base = []string{"--unshare-all", "--unshare-user"}

var hardening = []string{
	"--die-with-parent", "--new-session",
	"--disable-userns", "--assert-userns-disabled",
	"--cap-drop", "ALL", "--hostname", "sandbox", "--clearenv",
}

var usrFS = []string{
	"--ro-bind", "/usr", "/usr",
	"--symlink", "usr/bin", "/bin",
	"--symlink", "usr/sbin", "/sbin",
	"--symlink", "usr/lib", "/lib",
	"--symlink", "usr/lib64", "/lib64",
	"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
	"--dir", "/var/tmp", "--dir", "/run",
}

func etcArgs(net bool) []string {
	var a []string
	for _, f := range etcFiles {
		a = append(a, "--ro-bind-try", f, f)
	}
	if net {
		a = append(a, "--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf")
	}
	return a
}

var defaultEnv = []string{
	"--setenv", "PATH", defaultPath,
	"--setenv", "HOME", homeDir,
	"--setenv", "LANG", "C.UTF-8",
	"--setenv", "TERM", "dumb",
	"--setenv", "USER", "sandbox",
	"--setenv", "TMPDIR", "/tmp",
}

func cat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestBuildExactArgv(t *testing.T) {
	ws := &sandboxkit.Workspace{Lower: "/srv/repo", Upper: "/var/ws/c1/upper", Work: "/var/ws/c1/work"}
	tests := []struct {
		name   string
		policy sandboxkit.Policy
		argv   []string
		want   []string
		files  int
	}{
		{
			name:   "zero policy",
			policy: sandboxkit.Policy{UID: 1000, GID: 1000},
			argv:   []string{"true"},
			want: cat([]string{"bwrap"}, base, hardening, usrFS, etcArgs(false),
				[]string{"--file", "3", "/etc/passwd", "--file", "4", "/etc/group", "--tmpfs", homeDir,
					"--chdir", homeDir}, defaultEnv, []string{"--", "true"}),
			files: 2,
		},
		{
			name:   "workspace",
			policy: sandboxkit.Policy{Bwrap: "/usr/local/bin/bwrap", Workspace: ws, UID: 1000, GID: 1000},
			argv:   []string{"sh", "-c", "echo hi > f"},
			want: cat([]string{"/usr/local/bin/bwrap"}, base, hardening, usrFS, etcArgs(false),
				[]string{"--file", "3", "/etc/passwd", "--file", "4", "/etc/group", "--tmpfs", homeDir,
					"--overlay-src", "/srv/repo", "--overlay", "/var/ws/c1/upper", "/var/ws/c1/work", "/workspace",
					"--chdir", "/workspace"}, defaultEnv, []string{"--", "sh", "-c", "echo hi > f"}),
			files: 2,
		},
		{
			name: "network, binds, env override, dir, seccomp",
			policy: sandboxkit.Policy{
				ShareNet:  true,
				Env:       []string{"TERM=xterm", "GOFLAGS=-mod=mod"},
				ReadOnly:  []sandboxkit.Bind{{Src: "/opt/tool"}},
				ReadWrite: []sandboxkit.Bind{{Src: "/srv/cache", Dst: "/cache"}},
				Tmpfs:     []string{"/opt/tool/secrets"},
				Dir:       "/cache",
				Seccomp:   testFilter(t),
				UID:       1000, GID: 1000,
			},
			argv: []string{"make"},
			want: cat([]string{"bwrap"}, base, []string{"--share-net"}, hardening, usrFS, etcArgs(true),
				[]string{"--file", "3", "/etc/passwd", "--file", "4", "/etc/group",
					"--ro-bind", "/opt/tool", "/opt/tool", "--bind", "/srv/cache", "/cache",
					"--tmpfs", "/opt/tool/secrets", "--tmpfs", homeDir, "--chdir", "/cache",
					"--setenv", "PATH", defaultPath, "--setenv", "HOME", homeDir, "--setenv", "LANG", "C.UTF-8",
					"--setenv", "TERM", "xterm", "--setenv", "USER", "sandbox", "--setenv", "TMPDIR", "/tmp",
					"--setenv", "GOFLAGS", "-mod=mod",
					"--seccomp", "5", "--", "make"}),
			files: 3,
		},
		{
			name: "stacked workspace and read-only overlays",
			policy: sandboxkit.Policy{
				Workspace:        &sandboxkit.Workspace{Lower: "/srv/repo", Layers: []string{"/var/ws/c1/upper"}, Upper: "/var/ws/c1.sub/upper", Work: "/var/ws/c1.sub/work"},
				ReadOnlyOverlays: []sandboxkit.ReadOnlyOverlay{{Layers: []string{"/srv/repo", "/var/ws/c1/upper"}, Dst: "/base"}, {Layers: []string{"/srv/other"}, Dst: "/other"}},
				UID:              1000, GID: 1000,
			},
			argv: []string{"true"},
			want: cat([]string{"bwrap"}, base, hardening, usrFS, etcArgs(false),
				[]string{"--file", "3", "/etc/passwd", "--file", "4", "/etc/group", "--tmpfs", homeDir,
					"--overlay-src", "/srv/repo", "--overlay-src", "/var/ws/c1/upper", "--overlay", "/var/ws/c1.sub/upper", "/var/ws/c1.sub/work", "/workspace",
					"--overlay-src", "/srv/repo", "--overlay-src", "/var/ws/c1/upper", "--ro-overlay", "/base",
					"--overlay-src", "/srv/other", "--tmp-overlay", "/other", "--remount-ro", "/other",
					"--chdir", "/workspace"}, defaultEnv, []string{"--", "true"}),
			files: 2,
		},
		{
			name:   "host view",
			policy: sandboxkit.Policy{HostView: true, Tmpfs: []string{"/home"}},
			argv:   []string{"ls"},
			want: cat([]string{"bwrap"}, base, hardening,
				[]string{"--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
					"--tmpfs", "/home", "--tmpfs", homeDir,
					"--remount-ro", "/dev", "--remount-ro", "/tmp", "--remount-ro", "/home", "--remount-ro", homeDir,
					"--chdir", homeDir}, defaultEnv, []string{"--", "ls"}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Build(&tt.policy, tt.argv...)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(l.Args, tt.want) {
				t.Errorf("argv differs\n got: %q\nwant: %q", l.Args, tt.want)
			}
			if l.Path != tt.want[0] {
				t.Errorf("Path = %q, want %q", l.Path, tt.want[0])
			}
			if len(l.Env) != 0 {
				t.Errorf("bwrap's own environment = %q, want empty", l.Env)
			}
			if len(l.Files) != tt.files {
				t.Errorf("%d files, want %d", len(l.Files), tt.files)
			}
		})
	}
}

func TestBuildSyntheticPasswd(t *testing.T) {
	p := sandboxkit.Policy{UID: 1234, GID: 5678}
	l, err := Build(&p, "id")
	if err != nil {
		t.Fatal(err)
	}
	passwd, group := string(l.Files[0]), string(l.Files[1])
	if !strings.Contains(passwd, "sandbox:x:1234:5678:sandbox:/home/sandbox:/bin/sh\n") {
		t.Errorf("passwd lacks the sandbox user:\n%s", passwd)
	}
	if !strings.Contains(group, "sandbox:x:5678:\n") {
		t.Errorf("group lacks the sandbox group:\n%s", group)
	}
}

func TestBuildRejects(t *testing.T) {
	tests := []struct {
		name   string
		policy sandboxkit.Policy
		argv   []string
		want   string
	}{
		{"no command", sandboxkit.Policy{}, nil, "no command"},
		{"relative lower", sandboxkit.Policy{Workspace: &sandboxkit.Workspace{Lower: "repo", Upper: "/u", Work: "/w"}}, []string{"true"}, "workspace lower dir"},
		{"empty upper", sandboxkit.Policy{Workspace: &sandboxkit.Workspace{Lower: "/r", Work: "/w"}}, []string{"true"}, "workspace upper dir"},
		{"relative bind", sandboxkit.Policy{ReadOnly: []sandboxkit.Bind{{Src: "etc"}}}, []string{"true"}, "bind source"},
		{"relative bind dst", sandboxkit.Policy{ReadWrite: []sandboxkit.Bind{{Src: "/a", Dst: "b"}}}, []string{"true"}, "bind destination"},
		{"bad env", sandboxkit.Policy{Env: []string{"NOVALUE"}}, []string{"true"}, "not KEY=value"},
		{"relative dir", sandboxkit.Policy{Dir: "src"}, []string{"true"}, "working directory"},
		{"relative tmpfs", sandboxkit.Policy{Tmpfs: []string{"x"}}, []string{"true"}, "tmpfs"},
		{"relative layer", sandboxkit.Policy{Workspace: &sandboxkit.Workspace{Lower: "/r", Layers: []string{"l"}, Upper: "/u", Work: "/w"}}, []string{"true"}, "workspace layer"},
		{"empty read-only overlay", sandboxkit.Policy{ReadOnlyOverlays: []sandboxkit.ReadOnlyOverlay{{Dst: "/base"}}}, []string{"true"}, "no layers"},
		{"relative read-only overlay", sandboxkit.Policy{ReadOnlyOverlays: []sandboxkit.ReadOnlyOverlay{{Layers: []string{"a"}, Dst: "/base"}}}, []string{"true"}, "read-only overlay"},
		{"empty seccomp", sandboxkit.Policy{Seccomp: []byte{}}, []string{"true"}, "seccomp"},
		{"ragged seccomp", sandboxkit.Policy{Seccomp: make([]byte, 12)}, []string{"true"}, "seccomp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(&tt.policy, tt.argv...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Build error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
	// A filter that cannot load must make the sandbox unavailable, never
	// run unfiltered.
	_, err := Build(&sandboxkit.Policy{Seccomp: make([]byte, 12)}, "true")
	if !errors.Is(err, sandboxkit.ErrUnavailable) {
		t.Errorf("ragged seccomp: %v is not ErrUnavailable", err)
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
