package seccomp

// AUDIT_ARCH_* values: seccomp_data.arch tells which system call table
// a call is made through.
const (
	auditArchX86_64  = 0xC000003E
	auditArchI386    = 0x40000003
	auditArchAarch64 = 0xC00000B7
	auditArchARM     = 0x40000028

	// x32BIT marks a call through the x32 ABI on amd64: the arch is
	// x86_64, the number has this bit set.
	x32Bit = 0x40000000
)

// abi is one system call table.
type abi struct {
	name  string
	audit uint32
	nr    map[string]uint32
	// reviewed is the highest number whose call someone has read and
	// judged (allowed, or given a rule); every higher number is refused
	// with ENOSYS. Raising it is how a new kernel's calls open: read
	// each new call, add rules where needed, regenerate the blobs.
	reviewed uint32
	// private is a range [lo, hi) of architecture-private calls above
	// reviewed that stay allowed (ARM's cacheflush and set_tls).
	private [2]uint32
}

// reviewedLinux is the kernel whose calls the tables have reviewed:
// Linux 6.18, whose last call on every table is file_setattr (469).
const reviewedLinux = 469

// armPrivate is the ARM private call range (__ARM_NR_BASE, 0x0f0000,
// and the 0x800 numbers after it): cacheflush, set_tls and friends,
// which every arm32 program needs.
var armPrivate = [2]uint32{0x0f0000, 0x0f0800}

// Arch is a CPU architecture a filter is generated for: its native
// table and the compat table its kernels also accept.
type arch struct {
	goarch string
	native abi
	compat abi
	// x32 is set where the native table has an x32 variant that shares
	// its audit arch (amd64).
	x32 bool
}

// archs are the architectures blobs exist for, keyed by GOARCH.
//
// On amd64 the i386 table (int $0x80, AUDIT_ARCH_I386) gets the same
// rules translated to its numbers, and every x32 call (__X32_SYSCALL_BIT)
// is refused. On arm64 the arm32 (EABI) table gets the rules translated.
// On every table, numbers above reviewed are refused with ENOSYS.
// Any other audit arch is killed under enforce. Numbers are the kernel's
// (arch/*/entry/syscalls, include/uapi/asm-generic/unistd.h); a test
// checks the native tables against golang.org/x/sys/unix.
var archs = map[string]*arch{
	"amd64": {
		goarch: "amd64",
		x32:    true,
		native: abi{name: "x86_64", audit: auditArchX86_64, nr: map[string]uint32{
			"unshare": 272, "setns": 308, "clone": 56, "clone3": 435,
			"mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
			"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
			"ioctl": 16, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
			"perf_event_open": 298, "bpf": 321, "userfaultfd": 323,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"keyctl": 250, "add_key": 248, "request_key": 249,
			"kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
			"open_by_handle_at": 304, "syslog": 103, "acct": 163, "quotactl": 179, "quotactl_fd": 443, "uselib": 134,
			"personality": 135,
			"mbind":       237, "set_mempolicy": 238, "get_mempolicy": 239, "migrate_pages": 256, "move_pages": 279, "set_mempolicy_home_node": 450,
			"socket": 41, "socketpair": 53,
			"open_tree_attr": 467, "modify_ldt": 154, "pidfd_getfd": 438, "kcmp": 312, "process_madvise": 440, "fanotify_init": 300, "prctl": 157,
		}, reviewed: reviewedLinux},
		compat: abi{name: "i386", audit: auditArchI386, nr: map[string]uint32{
			"unshare": 310, "setns": 346, "clone": 120, "clone3": 435,
			"mount": 21, "umount": 22, "umount2": 52, "pivot_root": 217, "chroot": 61,
			"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
			"ioctl": 54, "ptrace": 26, "process_vm_readv": 347, "process_vm_writev": 348,
			"perf_event_open": 336, "bpf": 357, "userfaultfd": 374,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"keyctl": 288, "add_key": 286, "request_key": 287,
			"kexec_load": 283, "init_module": 128, "finit_module": 350, "delete_module": 129,
			"open_by_handle_at": 342, "syslog": 103, "acct": 51, "quotactl": 131, "quotactl_fd": 443, "uselib": 86,
			"personality": 136,
			"mbind":       274, "set_mempolicy": 276, "get_mempolicy": 275, "migrate_pages": 294, "move_pages": 317, "set_mempolicy_home_node": 450,
			"socket": 359, "socketpair": 360, "socketcall": 102,
			"open_tree_attr": 467, "modify_ldt": 123, "pidfd_getfd": 438, "kcmp": 349, "process_madvise": 440, "fanotify_init": 338, "prctl": 172,
		}, reviewed: reviewedLinux},
	},
	"arm64": {
		goarch: "arm64",
		native: abi{name: "aarch64", audit: auditArchAarch64, nr: map[string]uint32{
			"unshare": 97, "setns": 268, "clone": 220, "clone3": 435,
			"mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
			"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
			"ioctl": 29, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
			"perf_event_open": 241, "bpf": 280, "userfaultfd": 282,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"keyctl": 219, "add_key": 217, "request_key": 218,
			"kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
			"open_by_handle_at": 265, "syslog": 116, "acct": 89, "quotactl": 60, "quotactl_fd": 443,
			"personality": 92,
			"mbind":       235, "set_mempolicy": 237, "get_mempolicy": 236, "migrate_pages": 238, "move_pages": 239, "set_mempolicy_home_node": 450,
			"socket": 198, "socketpair": 199,
			"open_tree_attr": 467, "pidfd_getfd": 438, "kcmp": 272, "process_madvise": 440, "fanotify_init": 262, "prctl": 167,
		}, reviewed: reviewedLinux},
		compat: abi{name: "arm", audit: auditArchARM, nr: map[string]uint32{
			"unshare": 337, "setns": 375, "clone": 120, "clone3": 435,
			"mount": 21, "umount2": 52, "pivot_root": 218, "chroot": 61,
			"open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
			"ioctl": 54, "ptrace": 26, "process_vm_readv": 376, "process_vm_writev": 377,
			"perf_event_open": 364, "bpf": 386, "userfaultfd": 388,
			"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
			"keyctl": 311, "add_key": 309, "request_key": 310,
			"kexec_load": 347, "kexec_file_load": 401, "init_module": 128, "finit_module": 379, "delete_module": 129,
			"open_by_handle_at": 371, "syslog": 103, "acct": 51, "quotactl": 131, "quotactl_fd": 443, "uselib": 86,
			"personality": 136,
			"mbind":       319, "set_mempolicy": 321, "get_mempolicy": 320, "migrate_pages": 400, "move_pages": 344, "set_mempolicy_home_node": 450,
			"socket": 281, "socketpair": 288,
			"open_tree_attr": 467, "pidfd_getfd": 438, "kcmp": 378, "process_madvise": 440, "fanotify_init": 367, "prctl": 172,
		}, reviewed: reviewedLinux, private: armPrivate},
	},
}
