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
	tiocsetd  = 0x5423 // TIOCSETD: change a terminal's line discipline

	personalityQuery = 0xffffffff // personality(0xffffffff) reads the persona
	perLinux         = 0          // PER_LINUX, the default persona
	perLinux32       = 8          // PER_LINUX32: uname reports i686 (linux32, setarch i686)

	prSetMM = 35 // PR_SET_MM: rewrite the process's memory map descriptors

	afUnix    = 1
	afInet    = 2
	afInet6   = 10
	afNetlink = 16

	sysSocket     = 1 // socketcall(2) subcall number of socket(2)
	sysSocketpair = 8 // socketcall(2) subcall number of socketpair(2)
)

// errno is the refusal a rule asks for under enforce.
type errno int

const (
	eperm        errno = 1  // EPERM: the caller is not allowed
	enosys       errno = 38 // ENOSYS: as if the kernel lacked the call, so libc and runtimes fall back
	eafnosupport errno = 97 // EAFNOSUPPORT: as if the kernel lacked the socket family, what programs probing for one expect
)

// errnos lists every refusal a rule can ask for.
var errnos = []errno{eperm, enosys, eafnosupport}

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
	{name: "open_tree_attr", errno: enosys, why: "new mount API: detached mount trees with attributes (Linux 6.15)"},

	// Terminal injection: pushing input into the controlling terminal
	// types commands into the shell that started the sandbox. Line
	// disciplines (n_hdlc, n_gsm) have carried local privilege
	// escalations, and a build never changes one.
	{name: "ioctl", test: &argTest{arg: 1, oneOf: []uint32{tiocsti, tioclinux, tiocsetd}}, errno: eperm, why: "TIOCSTI/TIOCLINUX: typing into the host's terminal; TIOCSETD: line discipline LPEs"},

	// Reading and writing other processes' memory; with the same uid,
	// namespaces alone do not stop it for inherited descriptors.
	{name: "ptrace", errno: eperm, why: "tracing: another process's memory and registers"},
	{name: "process_vm_readv", errno: eperm, why: "reading another process's memory"},
	{name: "process_vm_writev", errno: eperm, why: "writing another process's memory"},
	// The rest of the ptrace family: the same access check as ptrace,
	// and nothing a build needs.
	{name: "pidfd_getfd", errno: eperm, why: "taking a descriptor out of another process"},
	{name: "kcmp", errno: eperm, why: "comparing other processes' kernel objects (checkpoint tools only)"},
	{name: "process_madvise", errno: eperm, why: "advising on another process's memory"},
	// PR_SET_MM rewrites the mm's layout fields (checkpoint/restore); it
	// needs CAP_SYS_RESOURCE, which a sandbox never has. Other prctl
	// options (PR_SET_NAME, PR_SET_PDEATHSIG, …) are everyday calls.
	{name: "prctl", test: &argTest{arg: 0, oneOf: []uint32{prSetMM}}, errno: eperm, why: "PR_SET_MM: rewriting the memory map's descriptors"},

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
	// fanotify watches whole mounts and filesystems; unprivileged since
	// 5.13 in a limited form. Tools watch files with inotify.
	{name: "fanotify_init", errno: eperm, why: "fanotify: mount-wide file event monitoring, large kernel surface"},

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
	// Writing a segment into the local descriptor table: Wine and
	// dosemu only (Go on 386 uses set_thread_area), and 16-bit segment
	// handling has a record of kernel bugs. amd64 only.
	{name: "modify_ldt", errno: eperm, why: "LDT segments: 16-bit and segment code paths"},
	// Personas change the address-space layout (ADDR_NO_RANDOMIZE,
	// READ_IMPLIES_EXEC) and old ABI quirks; only the query, the default
	// and PER_LINUX32 (linux32 / setarch i686 builds) are allowed, as
	// Docker does.
	{name: "personality", test: &argTest{arg: 0, noneOf: []uint32{personalityQuery, perLinux, perLinux32}}, errno: eperm, why: "personality: disabling ASLR, READ_IMPLIES_EXEC"},
	// NUMA policy calls: host memory layout and rarely-exercised code.
	{name: "mbind", errno: eperm, why: "NUMA policy: rarely exercised kernel code"},
	{name: "set_mempolicy", errno: eperm, why: "NUMA policy: rarely exercised kernel code"},
	{name: "get_mempolicy", errno: eperm, why: "NUMA policy: host memory layout"},
	{name: "migrate_pages", errno: eperm, why: "NUMA: moving other processes' pages"},
	{name: "move_pages", errno: eperm, why: "NUMA: moving other processes' pages"},
	{name: "set_mempolicy_home_node", errno: eperm, why: "NUMA policy: rarely exercised kernel code"},

	// Socket families beyond UNIX, IP and netlink reach protocol code
	// with a long LPE record (AF_ALG crypto, AF_VSOCK, packet, rds,
	// tipc, …) that a coding sandbox never needs. EAFNOSUPPORT, as for a
	// family the kernel lacks: programs probing for one move on.
	{name: "socket", test: &argTest{arg: 0, noneOf: []uint32{afUnix, afInet, afInet6, afNetlink}}, errno: eafnosupport, why: "socket families beyond UNIX/INET/INET6/NETLINK (AF_ALG, AF_VSOCK, …)"},
	// socketpair runs the family's create code too (and can load its
	// module; TIPC implements pairs). Python, Node, Go and git pair only
	// UNIX sockets.
	{name: "socketpair", test: &argTest{arg: 0, noneOf: []uint32{afUnix}}, errno: eafnosupport, why: "socket pairs beyond UNIX (the family's create code)"},
	// i386 only: socketcall passes socket(2)'s and socketpair(2)'s family
	// in memory, out of the filter's sight, so creating sockets through
	// it is refused; programs must use the direct calls (kernels since
	// 4.3).
	{name: "socketcall", test: &argTest{arg: 0, oneOf: []uint32{sysSocket, sysSocketpair}}, errno: enosys, why: "socket family out of the filter's sight (i386 socketcall)"},
}

// Calls newer than the tables: every number above an ABI's reviewed
// (abi.reviewed, arch.go) is refused with ENOSYS, as on a kernel that
// lacks it, so a new kernel's calls stay closed until someone reads
// them and raises the number (a reviewed change of arch.go, its blobs
// and the probe). libc and Go fall back on ENOSYS.
const unreviewedWhy = "a call newer than the reviewed tables (refused until reviewed)"
