package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Classic BPF, the subset a seccomp filter needs (linux/filter.h).
const (
	bpfLdWAbs = 0x20 // BPF_LD | BPF_W | BPF_ABS: A = seccomp_data[k:k+4]
	bpfJa     = 0x05 // BPF_JMP | BPF_JA: pc += k
	bpfJeqK   = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgeK   = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfJsetK  = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	bpfRetK   = 0x06 // BPF_RET | BPF_K

	// bpfMaxInsns is the kernel's BPF_MAXINSNS.
	bpfMaxInsns = 4096
	// insnSize is sizeof(struct sock_filter).
	insnSize = 8
)

// Offsets into struct seccomp_data.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16 // args[i] at offArgs + 8*i; little-endian, so the low 32 bits come first
)

// SECCOMP_RET_* actions.
const (
	retKillProcess = 0x80000000
	retErrno       = 0x00050000
	retUserNotif   = 0x7fc00000
	retLog         = 0x7ffc0000
	retAllow       = 0x7fff0000
)

// insn is one struct sock_filter.
type insn struct {
	code   uint16
	jt, jf uint8
	k      uint32
}

// assembler builds a program with forward jumps to named labels.
type assembler struct {
	prog   []insn
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at     int
	jt, jf string // "" means the next instruction
	ja     string
}

func (a *assembler) emit(i insn) { a.prog = append(a.prog, i) }

func (a *assembler) load(off uint32) { a.emit(insn{code: bpfLdWAbs, k: off}) }

func (a *assembler) ret(k uint32) { a.emit(insn{code: bpfRetK, k: k}) }

// jump emits a conditional jump to label jt when it holds, else to jf.
func (a *assembler) jump(code uint16, k uint32, jt, jf string) {
	a.fixups = append(a.fixups, fixup{at: len(a.prog), jt: jt, jf: jf})
	a.emit(insn{code: code, k: k})
}

// goTo emits an unconditional jump.
func (a *assembler) goTo(label string) {
	a.fixups = append(a.fixups, fixup{at: len(a.prog), ja: label})
	a.emit(insn{code: bpfJa})
}

func (a *assembler) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	if _, dup := a.labels[name]; dup {
		panic("seccomp: duplicate label " + name)
	}
	a.labels[name] = len(a.prog)
}

// assemble resolves the jumps and encodes the program as the kernel
// reads it (native byte order, which is little-endian on every arch a
// blob exists for).
func (a *assembler) assemble() ([]byte, error) {
	offset := func(from int, label string, max int) (int, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		if !ok {
			return 0, fmt.Errorf("seccomp: undefined label %q", label)
		}
		d := to - from - 1
		if d < 0 || d > max {
			return 0, fmt.Errorf("seccomp: jump from %d to %q (%d) out of range", from, label, to)
		}
		return d, nil
	}
	for _, f := range a.fixups {
		if f.ja != "" {
			d, err := offset(f.at, f.ja, 1<<31)
			if err != nil {
				return nil, err
			}
			a.prog[f.at].k = uint32(d)
			continue
		}
		t, err := offset(f.at, f.jt, 255)
		if err != nil {
			return nil, err
		}
		e, err := offset(f.at, f.jf, 255)
		if err != nil {
			return nil, err
		}
		a.prog[f.at].jt, a.prog[f.at].jf = uint8(t), uint8(e)
	}
	if err := check(a.prog); err != nil {
		return nil, err
	}
	return encode(a.prog), nil
}

func encode(prog []insn) []byte {
	b := make([]byte, 0, len(prog)*insnSize)
	for _, i := range prog {
		b = binary.LittleEndian.AppendUint16(b, i.code)
		b = append(b, i.jt, i.jf)
		b = binary.LittleEndian.AppendUint32(b, i.k)
	}
	return b
}

func decode(b []byte) ([]insn, error) {
	if len(b) == 0 || len(b)%insnSize != 0 {
		return nil, fmt.Errorf("%d bytes is not a whole number of %d-byte instructions", len(b), insnSize)
	}
	prog := make([]insn, len(b)/insnSize)
	for n := range prog {
		c := b[n*insnSize:]
		prog[n] = insn{code: binary.LittleEndian.Uint16(c), jt: c[2], jf: c[3], k: binary.LittleEndian.Uint32(c[4:])}
	}
	return prog, nil
}

// check is the verifier: only the instructions this package emits,
// loads of whole aligned words inside seccomp_data, jumps that stay
// inside the program, and a program that cannot run off its end. The
// kernel checks more when the filter is loaded; this catches a damaged
// blob before a sandbox is started with it.
func check(prog []insn) error {
	if len(prog) == 0 || len(prog) > bpfMaxInsns {
		return fmt.Errorf("%d instructions (want 1 to %d)", len(prog), bpfMaxInsns)
	}
	for pc, i := range prog {
		switch i.code {
		case bpfLdWAbs:
			// sizeof(struct seccomp_data) is 64.
			if i.k%4 != 0 || i.k > 60 {
				return fmt.Errorf("instruction %d loads offset %d, outside seccomp_data", pc, i.k)
			}
		case bpfJa:
			if int64(pc)+1+int64(i.k) >= int64(len(prog)) {
				return fmt.Errorf("instruction %d jumps past the end", pc)
			}
		case bpfJeqK, bpfJgeK, bpfJsetK:
			if pc+1+int(max(i.jt, i.jf)) >= len(prog) {
				return fmt.Errorf("instruction %d jumps past the end", pc)
			}
		case bpfRetK:
		default:
			return fmt.Errorf("instruction %d has opcode %#x, which this filter never uses", pc, i.code)
		}
	}
	if prog[0] != (insn{code: bpfLdWAbs, k: offArch}) {
		return errors.New("the program does not start by checking the architecture")
	}
	if prog[len(prog)-1].code != bpfRetK {
		return errors.New("the program can run off its end (its last instruction is not a return)")
	}
	return nil
}
