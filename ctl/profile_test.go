package ctl_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/sandboxkit/diag"
)

func TestProfileListsEveryProfile(t *testing.T) {
	r := ctl(t, "sandbox", "profile")
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("want exit 0, got %v", r)
	}
	if !strings.Contains(r.stdout, "placeholders") {
		t.Errorf("output does not say the paths are placeholders:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "pid 1 of a pid namespace of its own") {
		t.Errorf("output does not say how bwrap is started:\n%s", r.stdout)
	}
	sections := map[string]string{}
	for _, s := range strings.Split(r.stdout, "\n# profile ")[1:] {
		name, body, _ := strings.Cut(s, "\n")
		sections[name] = body
	}
	for _, name := range []string{"workspace", "setup", "external-agent", "office", "mcp", "host-readonly", "git"} {
		if !strings.HasPrefix(sections[name], "bwrap\n") {
			t.Errorf("profile %s missing or not a bwrap argv:\n%s", name, sections[name])
		}
	}
	// One option per line, with its arguments.
	lines := strings.Split(sections["workspace"], "\n")
	for _, want := range []string{
		"--unshare-all", "--disable-userns", "--cap-drop ALL", "--clearenv",
		"--overlay-src /srv/codumentor/lower",
		"--overlay /srv/codumentor/upper /srv/codumentor/work /workspace",
		"--ro-bind /usr /usr", "--tmpfs /tmp", "-- CMD ARG...",
	} {
		if !slices.Contains(lines, "  "+want) {
			t.Errorf("workspace profile lacks the line %q:\n%s", want, sections["workspace"])
		}
	}
	if strings.Contains(sections["workspace"], "--share-net") {
		t.Errorf("workspace profile shares the network")
	}
	if !strings.Contains(sections["office"], "--ro-bind /srv/codumentor/input/document.docx /input/document.docx") {
		t.Errorf("office profile lacks its read-only input:\n%s", sections["office"])
	}
}

func TestProfileJSON(t *testing.T) {
	r := ctl(t, "sandbox", "profile", "--json", "workspace", "mcp")
	if r.code != 0 {
		t.Fatalf("want exit 0, got %v", r)
	}
	var m map[string][]string
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if len(m) != 2 {
		t.Errorf("want the two profiles asked for, got %d", len(m))
	}
	ws := strings.Join(m["workspace"], " ")
	if !strings.Contains(ws, "--overlay-src /srv/codumentor/lower --overlay /srv/codumentor/upper /srv/codumentor/work /workspace") {
		t.Errorf("workspace argv lacks the overlay: %s", ws)
	}
	mcp := m["mcp"]
	if len(mcp) == 0 || mcp[0] != "bwrap" || slices.Contains(mcp, "--overlay") || !slices.Contains(mcp, "--unshare-all") {
		t.Errorf("mcp argv: %q", mcp)
	}
}

func TestProfileUnknown(t *testing.T) {
	r := ctl(t, "sandbox", "profile", "nope")
	if r.code != 2 || !strings.Contains(r.stderr, `unknown profile "nope"`) || !strings.Contains(r.stderr, "workspace") {
		t.Errorf("want exit 2 naming the known profiles, got %v", r)
	}
}

func TestProfileAllowHost(t *testing.T) {
	r := ctl(t, "sandbox", "profile", "--allow-host", "registry.npmjs.org:443", "setup", "workspace")
	if r.code != 0 {
		t.Fatal(r)
	}
	setup, ws, _ := strings.Cut(strings.SplitN(r.stdout, "# profile setup\n", 2)[1], "# profile workspace\n")
	for _, want := range []string{"--ro-bind " + diag.EgressSocketPlaceholder + " /run/sandboxkit-egress.sock", "--setenv HTTPS_PROXY http://127.0.0.1:3128"} {
		if !strings.Contains(setup, want) {
			t.Errorf("setup profile lacks %q:\n%s", want, setup)
		}
	}
	if strings.Contains(setup, "--share-net") || strings.Contains(ws, "PROXY") {
		t.Errorf("setup shares the network, or the workspace profile got the proxy:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "registry.npmjs.org:443") {
		t.Errorf("the allow-list is not shown:\n%s", r.stdout)
	}
}
