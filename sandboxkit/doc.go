// Package sandboxkit runs untrusted commands under bubblewrap (bwrap), in
// a copy-on-write view of a workspace, and refuses to run them when it
// cannot isolate them.
//
// What is isolated. A sandboxed command gets new user, mount, pid, ipc,
// uts, cgroup and network namespaces. It sees /usr and a curated part of
// /etc read-only, a fresh /proc and /dev, an empty /tmp and HOME
// (/home/sandbox), and, when the Policy has a Workspace, an overlay at
// /workspace whose writes land in an upper directory while the host tree
// stays untouched. It has no network (not even the host's 127.0.0.1)
// unless the Policy shares it or gives it an egress allow-list
// (Policy.Egress: its own network with only loopback, and a host-side
// proxy that connects only to the listed destinations, package egress),
// no capabilities, no_new_privs, no way to create nested user namespaces,
// a new session (no terminal injection), none of the host process's
// environment (PATH is /usr/local/bin:/usr/bin:/bin) and none of its open
// files beyond stdin, stdout and stderr. The sandbox dies with the
// process that started it, at any moment, even while bwrap is still
// setting it up.
//
// What is not. The command runs as the same user id as its caller: the
// kernel is the boundary, and a kernel bug reachable from inside the
// namespaces is an escape. The seccomp blocklist (package seccomp;
// Policy.Seccomp) narrows that surface: nested user namespaces, the mount
// API, io_uring, bpf, keyrings, ptrace, TIOCSTI and the rest of its list.
// In log mode those calls still run and the kernel logs them; enforce
// refuses them. Binds in the Policy (ReadOnly, ReadWrite, ShareNet,
// HostView) are holes made on purpose; each field says what it exposes.
//
// Fail closed. Before anything starts, the Doctor checks this machine
// (bwrap present, at least 0.12.0, not setuid, user namespaces, /proc,
// overlayfs, loopback, the seccomp filters verified and loadable). When a
// check fails, Run and StartSession return an *UnavailableError
// (errors.Is ErrUnavailable) that names the check and its remedy, and
// nothing is executed on the host. There is no fallback without a
// namespace, without /proc, or without a requested filter: a filter that
// is missing or damaged makes Run return ErrUnavailable rather than start
// the sandbox without it.
//
// What it may consume. Policy.Limits (Settings.Limits, else DefaultLimits) puts each Run and
// each Session in a cgroup of its own under a subtree delegated to the
// service user (package cgroup; the caller names it, Limits.Cgroup and
// CgroupParent): a fork bomb stops at its pids limit, an allocation beyond
// its memory is OOM-killed inside it, its CPU is a quota. /tmp and HOME
// are sized tmpfs; file size, open files and core dumps are hard rlimits,
// and so, per sandbox, address space and CPU time when set; a disk budget
// stops the command that fills the workspace (or a directory bound
// ReadWrite). Without a delegated cgroup the Doctor's "limits" check warns
// "rlimits only"; Limits.Require makes that a refusal (ErrUnavailable,
// ErrLimitsUnavailable).
//
// Accountability. Policy.Launching is told of every start before it runs,
// a one-shot sandbox, a Session and each command in it, with argv, cwd
// and the filter's mode and digest; its error (say, an audit record that
// could not be written) refuses the start: ErrLaunchRefused, and nothing
// runs.
//
// Programs that start sandboxes (Run, Session, Doctor) must call Main
// first in main, and in TestMain: every bwrap is started by a spawner
// that is this same binary, re-executed once per process, and a
// Session's pid 1 inside the sandbox is this binary too. Without Main,
// they return an error that says so. Package diag shows the bwrap argv a
// Policy becomes and probes a filter on this machine.
//
// The call most users need, a command in a copy-on-write view of a tree:
//
//	p, err := sandboxkit.Settings{}.Workspace("build", &sandboxkit.Workspace{Lower: repo, Upper: upper, Work: work})
//	cmd := sandboxkit.Command(ctx, p, "sh", "-c", "make test")
//	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
//	err = cmd.Run()
package sandboxkit
