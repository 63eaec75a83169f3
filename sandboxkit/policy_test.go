package sandboxkit

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

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

func TestProfiles(t *testing.T) {
	ws := &Workspace{Lower: "/l", Upper: "/u", Work: "/w"}
	for _, name := range ProfileNames {
		o := ProfileOptions{}
		switch name {
		case ProfileWorkspace, ProfileSetup, ProfileExternalAgent:
			o.Workspace = ws
		case ProfileOffice:
			o.Input = "/srv/in/report.docx"
		case ProfileGit:
			o.Input, o.Output = "/srv/repos/r.git", "/srv/out"
		}
		p, err := Profile(name, o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		l, err := p.build([]string{"true"}, buildOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if slices.Contains(l.Args, "--share-net") {
			t.Errorf("%s shares the network by default", name)
		}
		for _, must := range []string{"--unshare-all", "--disable-userns", "--clearenv", "--die-with-parent", "--new-session"} {
			if !slices.Contains(l.Args, must) {
				t.Errorf("%s lacks %s", name, must)
			}
		}
	}
	bad := []struct {
		name string
		o    ProfileOptions
		want string
	}{
		{"nope", ProfileOptions{}, "unknown profile"},
		{ProfileWorkspace, ProfileOptions{}, "needs a workspace"},
		{ProfileWorkspace, ProfileOptions{Workspace: ws, ShareNet: true}, "ShareNet"},
		{ProfileOffice, ProfileOptions{}, "needs an input"},
		{ProfileOffice, ProfileOptions{Input: "rel.docx"}, "absolute"},
		{ProfileOffice, ProfileOptions{Input: "/a.docx", Workspace: ws}, "Workspace"},
		{ProfileMCP, ProfileOptions{Input: "/a"}, "Input"},
		{ProfileHostReadOnly, ProfileOptions{Workspace: ws}, "Workspace"},
		{ProfileGit, ProfileOptions{Input: "/m.git"}, "absolute"},
		{ProfileGit, ProfileOptions{Input: "/m.git", Output: "/o", ShareNet: true}, "ShareNet"},
		{ProfileOffice, ProfileOptions{Input: "/a.docx", Output: "/o"}, "Output"},
	}
	for _, b := range bad {
		if _, err := Profile(b.name, b.o); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("Profile(%s, %+v) = %v, want error mentioning %q", b.name, b.o, err, b.want)
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	os.WriteFile(file, []byte("secret"), 0o600)
	p, _ := Profile(ProfileHostReadOnly, ProfileOptions{Mask: []string{dir, file, filepath.Join(dir, "missing")}})
	for _, m := range []string{"/home", "/root", "/var/lib", dir} {
		if !slices.Contains(p.Tmpfs, m) {
			t.Errorf("host-readonly does not mask %s", m)
		}
	}
	if !slices.Contains(p.ReadOnly, Bind{Src: "/dev/null", Dst: file}) || slices.Contains(p.Tmpfs, file) {
		t.Errorf("a masked file is not behind /dev/null: %v %v", p.ReadOnly, p.Tmpfs)
	}
	if slices.Contains(p.Tmpfs, filepath.Join(dir, "missing")) {
		t.Errorf("a missing path is masked (bwrap cannot make its mount point in a read-only view): %v", p.Tmpfs)
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
