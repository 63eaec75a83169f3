#include "textflag.h"

// func int80(nr, a1, a2, a3, a4, a5 uintptr) (r uintptr)
//
// A system call through the i386 compat entry (int $0x80), the way a
// 32-bit program makes it: the kernel reports AUDIT_ARCH_I386 to the
// filter and takes the numbers of the i386 table.
TEXT ·int80(SB), NOSPLIT, $0-56
	MOVQ nr+0(FP), AX
	MOVQ a1+8(FP), BX
	MOVQ a2+16(FP), CX
	MOVQ a3+24(FP), DX
	MOVQ a4+32(FP), SI
	MOVQ a5+40(FP), DI
	INT  $0x80
	MOVQ AX, r+48(FP)
	RET
