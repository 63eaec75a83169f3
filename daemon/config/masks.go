package config

import (
	"os"
	"path/filepath"
	"slices"
)

// Files are the files the configuration names that a host read-only
// investigation must not read: the TLS certificate and key, the LDAP CA
// bundle and the mermaid script. The programs it names (sandbox.bwrap,
// browser.path, the commands and package directories of MCP servers and
// external agents) are not among them: they are software, as readable as
// the rest of the host's.
func (c Config) Files() []string {
	var out []string
	for _, f := range []string{c.TLS.CertFile, c.TLS.KeyFile, c.Auth.LDAP.CACertFile, c.MermaidRender.Script} {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

// systemBinDirs are shared by every program: masking one would hide the
// investigation's own tools, so only what is not a program is masked in
// them.
var systemBinDirs = []string{"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"}

// maxBinDirEntries bounds the entries HostMasks reads of the server
// binary's directory; one with more is masked whole.
const maxBinDirEntries = 10_000

// HostMasks are the host paths hidden from a host read-only
// investigation besides the sandbox profile's own (other users' homes,
// the service user's home, /run, /var/lib, ...): the instance directory
// with its data, workspaces and logs; the configuration file in use
// (configFile, "" for the instance's config.yaml) and the files it names
// (Files); and the directory of the server's binary exe when it holds
// anything but programs (a configuration or a key beside it), or, in a
// shared system directory such as /usr/local/bin, those entries. Each is
// absolute, named as given and as it resolves, in case one is a symlink
// to elsewhere; paths that do not exist are left out.
func HostMasks(inst Instance, configFile string, c Config, exe string) []string {
	if configFile == "" {
		configFile = inst.ConfigFile()
	}
	paths := append([]string{inst.Dir, inst.DataDir(), inst.WorkspacesDir(), inst.LogsDir(), configFile}, c.Files()...)
	if exe != "" {
		paths = append(paths, binDirMasks(filepath.Dir(exe))...)
	}
	var out []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			continue
		}
		if _, err := os.Lstat(abs); err != nil {
			continue
		}
		out = append(out, abs)
		if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
			out = append(out, real)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// binDirMasks are dir, or in a system bin directory its entries, when it
// holds anything but programs (executable regular files, or symlinks to
// them).
func binDirMasks(dir string) []string {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	ents, err := f.ReadDir(maxBinDirEntries + 1)
	shared := slices.Contains(systemBinDirs, dir)
	if (err != nil && len(ents) == 0) || len(ents) > maxBinDirEntries {
		if shared {
			return nil // an unreadable or huge /usr/bin: nothing known to hide
		}
		return []string{dir}
	}
	var other []string
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			continue
		}
		other = append(other, p)
	}
	switch {
	case len(other) == 0:
		return nil
	case shared:
		return other
	default:
		return []string{dir}
	}
}
