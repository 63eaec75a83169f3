package seccomp

import (
	"runtime/debug"

	"golang.org/x/sys/unix"
)

func int80(nr, a1, a2, a3, a4, a5 uintptr) (r uintptr)

// compatCall makes a call through the i386 table with int $0x80. It
// does not tell the Go scheduler that it blocks; runProbes keeps a
// second P and the collector off while it is used.
func compatCall(nr uint32, a [6]uint64) unix.Errno {
	r := int32(int80(uintptr(nr), uintptr(uint32(a[0])), uintptr(uint32(a[1])), uintptr(uint32(a[2])), uintptr(uint32(a[3])), uintptr(uint32(a[4]))))
	if r < 0 && r > -4096 {
		return unix.Errno(-r)
	}
	return 0
}

// compatAvailable reports whether int $0x80 reaches the i386 table on
// this kernel. Kernels built or booted without IA32 emulation (and some
// hypervisors) answer it with a general protection fault, which the
// runtime turns into a panic here instead of a crash.
func compatAvailable() (ok bool, why string) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			ok, why = false, "int $0x80 faults on this kernel (no IA32 emulation): the i386 table is unreachable here, so it was not probed"
		}
	}()
	if r := int80(20 /* i386 getpid */, 0, 0, 0, 0, 0); int(int32(r)) != unix.Getpid() {
		return false, "int $0x80 getpid returned a wrong pid: not probed"
	}
	return true, "i386 through int $0x80"
}
