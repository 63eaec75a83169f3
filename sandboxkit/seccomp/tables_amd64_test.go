package seccomp

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The native table against golang.org/x/sys, generated from the
// kernel's own table: a typo in ours would silently leave a call open.
func TestNativeTableMatchesXSys(t *testing.T) {
	want := map[string]uint32{
		"unshare": unix.SYS_UNSHARE, "setns": unix.SYS_SETNS, "clone": unix.SYS_CLONE, "clone3": unix.SYS_CLONE3,
		"mount": unix.SYS_MOUNT, "umount2": unix.SYS_UMOUNT2, "pivot_root": unix.SYS_PIVOT_ROOT, "chroot": unix.SYS_CHROOT,
		"open_tree": unix.SYS_OPEN_TREE, "move_mount": unix.SYS_MOVE_MOUNT, "fsopen": unix.SYS_FSOPEN, "fsconfig": unix.SYS_FSCONFIG,
		"fsmount": unix.SYS_FSMOUNT, "fspick": unix.SYS_FSPICK, "mount_setattr": unix.SYS_MOUNT_SETATTR,
		"ioctl": unix.SYS_IOCTL, "ptrace": unix.SYS_PTRACE, "process_vm_readv": unix.SYS_PROCESS_VM_READV, "process_vm_writev": unix.SYS_PROCESS_VM_WRITEV,
		"perf_event_open": unix.SYS_PERF_EVENT_OPEN, "bpf": unix.SYS_BPF, "userfaultfd": unix.SYS_USERFAULTFD,
		"io_uring_setup": unix.SYS_IO_URING_SETUP, "io_uring_enter": unix.SYS_IO_URING_ENTER, "io_uring_register": unix.SYS_IO_URING_REGISTER,
		"keyctl": unix.SYS_KEYCTL, "add_key": unix.SYS_ADD_KEY, "request_key": unix.SYS_REQUEST_KEY,
		"kexec_load": unix.SYS_KEXEC_LOAD, "kexec_file_load": unix.SYS_KEXEC_FILE_LOAD, "init_module": unix.SYS_INIT_MODULE,
		"finit_module": unix.SYS_FINIT_MODULE, "delete_module": unix.SYS_DELETE_MODULE, "open_by_handle_at": unix.SYS_OPEN_BY_HANDLE_AT,
		"syslog": unix.SYS_SYSLOG, "acct": unix.SYS_ACCT, "quotactl": unix.SYS_QUOTACTL, "quotactl_fd": unix.SYS_QUOTACTL_FD,
		"uselib": unix.SYS_USELIB, "personality": unix.SYS_PERSONALITY,
		"mbind": unix.SYS_MBIND, "set_mempolicy": unix.SYS_SET_MEMPOLICY, "get_mempolicy": unix.SYS_GET_MEMPOLICY,
		"migrate_pages": unix.SYS_MIGRATE_PAGES, "move_pages": unix.SYS_MOVE_PAGES, "set_mempolicy_home_node": unix.SYS_SET_MEMPOLICY_HOME_NODE,
		"socket": unix.SYS_SOCKET, "socketpair": unix.SYS_SOCKETPAIR,
		"open_tree_attr": unix.SYS_OPEN_TREE_ATTR, "modify_ldt": unix.SYS_MODIFY_LDT, "pidfd_getfd": unix.SYS_PIDFD_GETFD,
		"kcmp": unix.SYS_KCMP, "process_madvise": unix.SYS_PROCESS_MADVISE, "fanotify_init": unix.SYS_FANOTIFY_INIT, "prctl": unix.SYS_PRCTL,
	}
	got := archs["amd64"].native.nr
	if len(got) != len(want) {
		t.Errorf("table has %d entries, x/sys check covers %d", len(got), len(want))
	}
	for name, nr := range want {
		if got[name] != nr {
			t.Errorf("%s: table says %d, x/sys says %d", name, got[name], nr)
		}
	}
}

// The reviewed number is the last call of the kernel it names: x/sys
// knows it, and every x/sys call above it is refused. A newer x/sys that
// lists more calls does not open them; raising reviewedLinux does.
func TestReviewedMatchesXSys(t *testing.T) {
	if unix.SYS_FILE_SETATTR != reviewedLinux {
		t.Errorf("reviewedLinux = %d, but file_setattr (Linux 6.18's last call) is %d", reviewedLinux, unix.SYS_FILE_SETATTR)
	}
}
