package daemon

import (
	"fmt"
	"strings"

	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/sandboxkit"

	"golang.org/x/sys/unix"
)

// storageCheck is the readiness check "storage": the filesystems of the
// database and of the workspaces have more free space than the reserve
// (sandbox.limits.disk_reserve, disk_reserve_percent) that commands may
// not take. Below it the database's next writes may fail and no sandbox
// starts; deleting workspace files (or discarding a workspace's changes)
// brings it back. One statfs per directory.
func storageCheck(inst config.Instance, lim sandboxkit.Limits) api.Check {
	c := api.Check{Name: "storage", OK: true}
	var details []string
	for _, d := range []struct{ what, dir string }{{"database", inst.DataDir()}, {"workspaces", inst.WorkspacesDir()}} {
		free, size, err := diskFree(d.dir)
		if err != nil {
			c.OK = false
			details = append(details, fmt.Sprintf("%s (%s): %v", d.what, d.dir, err))
			continue
		}
		reserve := lim.DiskReserveOf(size)
		details = append(details, fmt.Sprintf("%s (%s): %s free of %s, %s kept free", d.what, d.dir, mib(free), mib(size), mib(reserve)))
		if free < reserve {
			c.OK = false
		}
	}
	c.Detail = strings.Join(details, "; ")
	if !c.OK {
		c.Remedy = "free disk space: delete files in workspaces (a conversation's owner can discard its workspace's changes), or old conversations and repositories; sandboxes start again once the free space is above the reserve"
	}
	return c
}

func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

// diskFree returns the space an unprivileged user may still write on the
// filesystem that holds path, and the filesystem's size, in bytes.
func diskFree(path string) (free, size int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, fmt.Errorf("free space: %w", err)
	}
	return int64(st.Bavail) * st.Frsize, int64(st.Blocks) * st.Frsize, nil
}
