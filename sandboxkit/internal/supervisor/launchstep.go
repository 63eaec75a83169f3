package supervisor

import (
	"fmt"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"
)

// A launch step (RlimitFlag, ScopeFlag) is this binary, run by the
// spawner as pid 1 of the pid namespace it makes for one bwrap, that
// prepares something and then execs bwrap in its place.
//
// bwrap reads /proc/<its child's pid>/ns right after it forks the
// sandbox, in the /proc it finds. The spawner shares the host's mount
// namespace, so that /proc shows another pid namespace than bwrap's; a
// bwrap exec'd directly gets pid 1 and its child pid 2, which names some
// host process (harmless: only the ids bwrap reports are read). A Go
// step, though, has started a few threads first, which took pids 2..N,
// and bwrap's child then gets a pid that the host's /proc may not have:
// "bwrap: open /proc/9/ns failed" on a host without a pid 9. So the
// spawner starts a step in a mount namespace of its own, with
// CAP_SYS_ADMIN in the spawner's user namespace, and the step mounts a
// /proc of its pid namespace (privately) and drops every capability
// before anything else: bwrap then starts with none, as always.

// IsLaunchStep reports whether the spawner's argv runs a launch step.
func IsLaunchStep(argv []string) bool {
	return len(argv) > 1 && argv[0] == "/proc/self/exe" && slices.Contains([]string{RlimitFlag, ScopeFlag}, argv[1])
}

// ownProc mounts, in the step's own mount namespace, a /proc that shows
// its pid namespace, then drops all capabilities. A step chained after
// another (no capability left, /proc already its own) does nothing.
//
// Capabilities are per thread: ownProc locks the calling goroutine to its
// thread for good, so that the step execs bwrap from the very thread
// that dropped them.
func ownProc() error {
	runtime.LockOSThread()
	if unix.Getpid() != 1 {
		return nil
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	if data[0].Effective&(1<<unix.CAP_SYS_ADMIN) != 0 {
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("making the mounts private: %w", err)
		}
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mounting /proc: %w", err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient: %w", err)
	}
	data = [2]unix.CapUserData{}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}
