package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// HostMasks names the instance, the configuration in use and the files
// it names (as given and where a symlink leads), the server binary's
// directory only when it holds more than programs, and nothing missing.
func TestHostMasks(t *testing.T) {
	root := t.TempDir()
	inst := Instance{Dir: filepath.Join(root, "instance")}
	if err := inst.Init(); err != nil {
		t.Fatal(err)
	}
	mk := func(p string, mode os.FileMode) string {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mk(inst.ConfigFile(), 0o600)
	conf := mk(filepath.Join(root, "etc", "config.yaml"), 0o600)
	cert := mk(filepath.Join(root, "tls", "cert.pem"), 0o644)
	key := mk(filepath.Join(root, "tls", "key.pem"), 0o600)
	link := filepath.Join(root, "key-link.pem")
	os.Symlink(key, link)
	ca := mk(filepath.Join(root, "ldap", "ca.pem"), 0o644)
	onlyBins := filepath.Join(root, "bin")
	exe := mk(filepath.Join(onlyBins, "codumentor"), 0o755)
	mk(filepath.Join(onlyBins, "codumentorctl"), 0o755)
	os.Symlink(exe, filepath.Join(onlyBins, "alias"))
	mixed := filepath.Join(root, "opt")
	mixedExe := mk(filepath.Join(mixed, "codumentor"), 0o755)
	mk(filepath.Join(mixed, "secrets.env"), 0o600)

	var c Config
	c.TLS.CertFile, c.TLS.KeyFile, c.Auth.LDAP.CACertFile = cert, link, ca
	c.MermaidRender.Script = filepath.Join(root, "missing.js")
	got := HostMasks(inst, conf, c, exe)
	want := []string{inst.Dir, inst.DataDir(), inst.WorkspacesDir(), inst.LogsDir(), conf, cert, key, link, ca}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("HostMasks:\n got %q\nwant %q", got, want)
	}
	if got := HostMasks(inst, "", Config{}, mixedExe); !slices.Contains(got, mixed) || !slices.Contains(got, inst.ConfigFile()) {
		t.Errorf("a binary beside a secrets file, the instance's config: %q; want %s and %s masked", got, mixed, inst.ConfigFile())
	}
}
