package seccomp

// The blocklist. Each rule names one system call, what it refuses and
// the escape class it closes. A sandbox already runs in its own user,
// mount, pid, network, ipc and uts namespaces with no capabilities; these
// rules take away kernel entry points that have carried local privilege
// escalations through that boundary, or that let a sandboxed process act
// on something outside its namespaces.
//
// Arguments are compared on their low 32 bits only: the kernel reads
// these arguments as int or unsigned int (clone truncates its flags to
// 32 bits as well), so high bits set by a caller cannot step around a
// rule.

const (
	cloneNewUser = 0x10000000 // CLONE_NEWUSER

	tiocsti   = 0x5412 // TIOCSTI: push bytes into a terminal's input
	tioclinux = 0x541C // TIOCLINUX: console selection and paste

	personalityQuery = 0xffffffff // personality(0xffffffff) reads the persona

	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16

	sysSocket = 1 // socketcall(2) subcall number of socket(2)
)

// errno is the refusal a rule asks for under enforce.
type errno int

const (
	eperm  errno = 1  // EPERM: the caller is not allowed
	enosys errno = 38 // ENOSYS: as if the kernel lacked the call, so libc and runtimes fall back
)

// argTest says which calls of a syscall a rule refuses, by one argument.
type argTest struct {
	arg int // argument index, 0-5
	// Exactly one of these is set.
	anyBit uint32   // refuse when arg & anyBit != 0
	oneOf  []uint32 // refuse when arg is one of these
	noneOf []uint32 // refuse unless arg is one of these
}

// rule refuses one system call, or the calls of it that test matches.
type rule struct {
	name  string   // syscall name, the key of the architecture tables
	test  *argTest // nil: every call
	errno errno
	why   string // the escape class, shown by the probe matrix
}

// rules is the blocklist, in the order the filter tests them.
var rules = []rule{
	// Nested user namespaces give an unprivileged process a full set of
	// capabilities over fresh namespaces: the entry point to most
	// kernel LPEs reachable without privilege (netfilter, overlayfs,
	// mount API bugs). bwrap's --disable-userns caps the count at 0 as
	// well; the filter does not rely on it.
	{name: "unshare", errno: eperm, why: "nested namespaces: capabilities over new namespaces"},
	{name: "setns", errno: eperm, why: "joining another namespace through an inherited fd"},
	{name: "clone", test: &argTest{arg: 0, anyBit: cloneNewUser}, errno: eperm, why: "nested user namespace at fork"},
	// clone3 passes its flags in memory, which a filter cannot read:
	// ENOSYS makes glibc and Go fall back to the filtered clone.
	{name: "clone3", errno: enosys, why: "clone flags out of the filter's sight (falls back to clone)"},

	// The mount family reshapes the filesystem view the sandbox was
	// built with; without capabilities it only fails, but each is a
	// large, bug-prone parser of untrusted input.
	{name: "mount", errno: eperm, why: "mount: reshaping the filesystem view"},
	{name: "umount", errno: eperm, why: "unmount: uncovering what the sandbox hid"},
	{name: "umount2", errno: eperm, why: "unmount: uncovering what the sandbox hid"},
	{name: "pivot_root", errno: eperm, why: "changing the root of the mount namespace"},
	{name: "chroot", errno: eperm, why: "chroot: classic escape with a held directory fd"},
	// The new mount API: ENOSYS, so tools fall back to mount(2).
	{name: "open_tree", errno: enosys, why: "new mount API: detached mount trees"},
	{name: "move_mount", errno: enosys, why: "new mount API: attaching mount trees"},
	{name: "fsopen", errno: enosys, why: "new mount API: filesystem contexts (parser LPEs)"},
	{name: "fsconfig", errno: enosys, why: "new mount API: filesystem parameters (parser LPEs)"},
	{name: "fsmount", errno: enosys, why: "new mount API: creating mounts"},
	{name: "fspick", errno: enosys, why: "new mount API: reconfiguring mounts"},
	{name: "mount_setattr", errno: enosys, why: "new mount API: changing mount attributes"},

	// Terminal injection: pushing input into the controlling terminal
	// types commands into the shell that started the sandbox.
	{name: "ioctl", test: &argTest{arg: 1, oneOf: []uint32{tiocsti, tioclinux}}, errno: eperm, why: "TIOCSTI/TIOCLINUX: typing into the host's terminal"},

	// Reading and writing other processes' memory; with the same uid,
	// namespaces alone do not stop it for inherited descriptors.
	{name: "ptrace", errno: eperm, why: "tracing: another process's memory and registers"},
	{name: "process_vm_readv", errno: eperm, why: "reading another process's memory"},
	{name: "process_vm_writev", errno: eperm, why: "writing another process's memory"},

	// Large kernel attack surfaces with a long record of LPEs.
	{name: "perf_event_open", errno: eperm, why: "perf events: kernel attack surface and side channels"},
	{name: "bpf", errno: eperm, why: "eBPF verifier and maps: kernel attack surface"},
	{name: "userfaultfd", errno: eperm, why: "userfaultfd: stalls the kernel mid-copy to win races"},
	{name: "io_uring_setup", errno: eperm, why: "io_uring: kernel attack surface, bypasses syscall filtering"},
	{name: "io_uring_enter", errno: eperm, why: "io_uring: kernel attack surface, bypasses syscall filtering"},
	{name: "io_uring_register", errno: eperm, why: "io_uring: kernel attack surface, bypasses syscall filtering"},
	// Keyrings are not namespaced: a sandbox could read or plant keys of
	// the server's user.
	{name: "keyctl", errno: eperm, why: "kernel keyring: not namespaced, shared with the host user"},
	{name: "add_key", errno: eperm, why: "kernel keyring: not namespaced, shared with the host user"},
	{name: "request_key", errno: eperm, why: "kernel keyring: not namespaced, shared with the host user"},

	// Whole-machine operations: refused for lack of capabilities
	// anyway; refusing them here removes the code paths from reach.
	{name: "kexec_load", errno: eperm, why: "loading a new kernel"},
	{name: "kexec_file_load", errno: eperm, why: "loading a new kernel"},
	{name: "init_module", errno: eperm, why: "loading kernel modules"},
	{name: "finit_module", errno: eperm, why: "loading kernel modules"},
	{name: "delete_module", errno: eperm, why: "unloading kernel modules"},
	{name: "open_by_handle_at", errno: eperm, why: "file handles: opening files outside the mount view (shocker)"},
	{name: "syslog", errno: eperm, why: "kernel log: kernel addresses and host activity"},
	{name: "acct", errno: eperm, why: "process accounting: host-wide state"},
	{name: "quotactl", errno: eperm, why: "disk quotas: host-wide state"},
	{name: "quotactl_fd", errno: eperm, why: "disk quotas: host-wide state"},
	{name: "uselib", errno: eperm, why: "obsolete library loader with a history of LPEs"},
	// Personas change the address-space layout (ADDR_NO_RANDOMIZE,
	// READ_IMPLIES_EXEC) and old ABI quirks; only the query is allowed.
	{name: "personality", test: &argTest{arg: 0, noneOf: []uint32{personalityQuery}}, errno: eperm, why: "personality: disabling ASLR, READ_IMPLIES_EXEC"},
	// NUMA policy calls: host memory layout and rarely-exercised code.
	{name: "mbind", errno: eperm, why: "NUMA policy: rarely exercised kernel code"},
	{name: "set_mempolicy", errno: eperm, why: "NUMA policy: rarely exercised kernel code"},
	{name: "get_mempolicy", errno: eperm, why: "NUMA policy: host memory layout"},
	{name: "migrate_pages", errno: eperm, why: "NUMA: moving other processes' pages"},
	{name: "move_pages", errno: eperm, why: "NUMA: moving other processes' pages"},
	{name: "set_mempolicy_home_node", errno: eperm, why: "NUMA policy: rarely exercised kernel code"},

	// Socket families beyond UNIX, IP and netlink reach protocol code
	// with a long LPE record (AF_ALG crypto, AF_VSOCK, packet, rds,
	// tipc, …) that a coding sandbox never needs.
	{name: "socket", test: &argTest{arg: 0, noneOf: []uint32{afUnix, afInet, afInet6, afNetlink}}, errno: eperm, why: "socket families beyond UNIX/INET/INET6/NETLINK (AF_ALG, AF_VSOCK, …)"},
	// i386 only: socketcall passes socket(2)'s family in memory, out of
	// the filter's sight, so creating a socket through it is refused;
	// programs must use the direct socket call (kernels since 4.3).
	{name: "socketcall", test: &argTest{arg: 0, oneOf: []uint32{sysSocket}}, errno: enosys, why: "socket family out of the filter's sight (i386 socketcall)"},
}
