package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Delegate creates the subtree of the user uid:gid named name under
// parent and hands it to that user; it must run as root. On cgroup v1 it
// is CONTROLLER/PARENT/NAME for each of Controllers (Options.Parent
// finds it); on v2 (hosts without systemd; with systemd, the unit's
// Delegate=yes does this) PARENT/NAME with the controllers enabled, and
// the service must then be started inside it. It is idempotent and
// returns the directories.
func Delegate(mount, parent, name string, uid, gid int) ([]string, error) {
	if mount == "" {
		mount = DefaultMount
	}
	if name == "" || !filepath.IsLocal(name) || strings.Contains(name, "/") {
		return nil, fmt.Errorf("cgroup: bad user name %q", name)
	}
	if parent == "" || !filepath.IsLocal(parent) || strings.Contains(parent, "/") {
		return nil, fmt.Errorf("cgroup: bad parent directory name %q", parent)
	}
	if _, err := os.Stat(filepath.Join(mount, "cgroup.controllers")); err == nil {
		return delegateV2(mount, parent, name, uid, gid)
	}
	var dirs []string
	for _, c := range Controllers {
		base := filepath.Join(mount, c)
		if _, err := os.Stat(base); err != nil {
			return nil, fmt.Errorf("cgroup: the v1 %s controller is not mounted at %s (mount it, or use a cgroup v2 host)", c, base)
		}
		top := filepath.Join(base, parent)
		dir := filepath.Join(top, name)
		for _, d := range []string{top, dir} {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("cgroup: %w", err)
			}
		}
		// The user creates children (mkdir needs the directory) and
		// moves its threads back to the subtree's root (tasks,
		// cgroup.procs). The root's limit files stay root's.
		for _, p := range []string{dir, filepath.Join(dir, "tasks"), filepath.Join(dir, "cgroup.procs")} {
			if err := os.Chown(p, uid, gid); err != nil {
				return nil, fmt.Errorf("cgroup: %w", err)
			}
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

func delegateV2(mount, parentName, name string, uid, gid int) ([]string, error) {
	parent := filepath.Join(mount, parentName)
	dir := filepath.Join(parent, name)
	for _, d := range []string{mount, parent} {
		if d != mount {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				return nil, fmt.Errorf("cgroup: %w", err)
			}
		}
		if err := enableControllers(d); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	// The files systemd's Delegate=yes hands over.
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.subtree_control"), filepath.Join(dir, "cgroup.threads")} {
		if err := os.Chown(p, uid, gid); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	return []string{dir}, nil
}

func enableControllers(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	var enable []string
	for _, c := range Controllers {
		if !slices.Contains(strings.Fields(string(b)), c) {
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) == 0 {
		return nil
	}
	if err := writeFile(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(enable, " ")); err != nil {
		return fmt.Errorf("cgroup: enable %s in %s: %w", strings.Join(enable, " "), dir, err)
	}
	return nil
}
