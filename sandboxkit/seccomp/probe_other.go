//go:build !amd64

package seccomp

import "golang.org/x/sys/unix"

// On arm64 the arm32 table needs an AArch32-capable CPU and an arm32
// binary; the probe does not reach it (the filter matrix test covers
// its rules).
func compatCall(nr uint32, a [6]uint64) unix.Errno { return unix.ENOSYS }

func compatAvailable() (bool, string) {
	return false, "arm32: not probed (needs an AArch32-capable CPU and an arm32 binary; the filter matrix test covers its rules)"
}
