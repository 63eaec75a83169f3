package seccomp

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"strings"
)

// actions are the filter's verdicts for one mode.
type actions struct {
	// errnos makes a refused call fail with its rule's errno
	// (retErrno); otherwise it gets refused (log, user notification).
	errnos  bool
	refused uint32
	x32     uint32 // any call through the x32 ABI
	foreign uint32 // any call through an audit arch the blob does not know
}

// deny is the verdict for a call a rule refuses with e.
func (a actions) deny(e errno) uint32 {
	if a.errnos {
		return retErrno | uint32(e)
	}
	return a.refused
}

func actionsFor(m Mode) (actions, error) {
	switch m {
	case Enforce:
		return actions{errnos: true, x32: retErrno | uint32(enosys), foreign: retKillProcess}, nil
	case Log:
		return actions{refused: retLog, x32: retLog, foreign: retLog}, nil
	case notify:
		// The probe's own filter: hand every call the blocklist matches
		// to the probe's listener, which lets it run.
		return actions{refused: retUserNotif, x32: retUserNotif, foreign: retAllow}, nil
	}
	return actions{}, fmt.Errorf("seccomp: no filter for mode %q", m)
}

// Generate returns the filter for GOARCH goarch in mode m: the exact
// bytes of the embedded blob, which a test keeps equal. Off has no
// filter.
func Generate(goarch string, m Mode) ([]byte, error) {
	a, ok := archs[goarch]
	if !ok {
		return nil, fmt.Errorf("seccomp: no filter for architecture %s", goarch)
	}
	act, err := actionsFor(m)
	if err != nil {
		return nil, err
	}
	var as assembler
	as.load(offArch)
	as.jump(bpfJeqK, a.native.audit, a.native.name, "")
	as.jump(bpfJeqK, a.compat.audit, a.compat.name, "")
	as.ret(act.foreign)
	for _, t := range []abi{a.native, a.compat} {
		if err := section(&as, t, a.x32 && t.audit == a.native.audit, act); err != nil {
			return nil, fmt.Errorf("seccomp: %s: %w", t.name, err)
		}
	}
	return as.assemble()
}

// leafSize is the most numbers the search compares one by one.
const leafSize = 4

// section emits the rules of one system call table: a search over the
// numbers whose comparisons jump to a rule's argument test or straight
// to a refusal, then the argument tests and the shared returns. Classic
// BPF jumps only forward, hence the order.
func section(as *assembler, t abi, x32 bool, act actions) error {
	l := func(s string) string { return t.name + "." + s }
	as.label(t.name)
	as.load(offNr)
	if x32 {
		as.jump(bpfJgeK, x32Bit, l("x32"), "")
	}
	// Numbers above the reviewed ones: ENOSYS, except an
	// architecture's private range. Inline returns keep every jump short.
	if t.reviewed == 0 {
		return fmt.Errorf("no reviewed number")
	}
	as.jump(bpfJgeK, t.reviewed+1, "", l("reviewed"))
	if lo, hi := t.private[0], t.private[1]; hi > lo {
		as.jump(bpfJgeK, hi, l("unreviewed"), "")
		as.jump(bpfJgeK, lo, l("private"), "")
		as.label(l("unreviewed"))
		as.ret(act.deny(enosys))
		as.label(l("private"))
		as.ret(retAllow)
	} else {
		as.ret(act.deny(enosys))
	}
	as.label(l("reviewed"))
	// Rules in number order: a reader of the disassembly finds them.
	type entry struct {
		nr uint32
		r  rule
	}
	var es []entry
	for _, r := range rules {
		if nr, ok := t.nr[r.name]; ok {
			es = append(es, entry{nr, r})
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].nr < es[j].nr })
	for i := 1; i < len(es); i++ {
		if es[i].nr == es[i-1].nr {
			return fmt.Errorf("%s and %s share number %d", es[i-1].r.name, es[i].r.name, es[i].nr)
		}
	}
	deny := func(e errno) string { return l(fmt.Sprintf("errno%d", e)) }
	// A binary search over the numbers, down to short runs of
	// comparisons: a call meets a handful of instructions instead of the
	// whole list, and so does the kernel when it precomputes which
	// numbers are always allowed (its action cache) at every load.
	var search func(lo, hi int, name string)
	search = func(lo, hi int, name string) {
		if name != "" {
			as.label(name)
		}
		if hi-lo <= leafSize {
			for _, e := range es[lo:hi] {
				target := deny(e.r.errno)
				if e.r.test != nil {
					target = l(e.r.name)
				}
				as.jump(bpfJeqK, e.nr, target, "")
			}
			// No rule matched.
			as.ret(retAllow)
			return
		}
		mid := (lo + hi) / 2
		right := l(fmt.Sprintf("ge%d", es[mid].nr))
		as.jump(bpfJgeK, es[mid].nr, right, "")
		search(lo, mid, "")
		search(mid, hi, right)
	}
	search(0, len(es), "")
	for _, e := range es {
		t := e.r.test
		if t == nil {
			continue
		}
		as.label(l(e.r.name))
		as.load(offArgs + 8*uint32(t.arg))
		switch {
		case t.anyBit != 0:
			as.jump(bpfJsetK, t.anyBit, deny(e.r.errno), l("allow"))
		case len(t.oneOf) > 0:
			for _, v := range t.oneOf {
				as.jump(bpfJeqK, v, deny(e.r.errno), "")
			}
			as.ret(retAllow)
		case len(t.noneOf) > 0:
			for _, v := range t.noneOf {
				as.jump(bpfJeqK, v, l("allow"), "")
			}
			as.goTo(deny(e.r.errno))
		default:
			return fmt.Errorf("rule %s has an empty argument test", e.r.name)
		}
	}
	as.label(l("allow"))
	as.ret(retAllow)
	for _, e := range errnos {
		as.label(deny(e))
		as.ret(act.deny(e))
	}
	if x32 {
		as.label(l("x32"))
		as.ret(act.x32)
	}
	return nil
}

// Archs lists the GOARCH values filters exist for.
func Archs() []string {
	var s []string
	for goarch := range archs {
		s = append(s, goarch)
	}
	sort.Strings(s)
	return s
}

// Blobs returns the files go generate writes into blobs/: one program
// per architecture and mode (BlobName), and their SHA-256 manifest.
func Blobs() (map[string][]byte, error) {
	files := map[string][]byte{}
	var sums strings.Builder
	for _, goarch := range Archs() {
		for _, m := range []Mode{Enforce, Log} {
			prog, err := Generate(goarch, m)
			if err != nil {
				return nil, err
			}
			name := BlobName(goarch, m)
			files[name] = prog
			fmt.Fprintf(&sums, "%x  %s\n", sha256.Sum256(prog), name)
		}
	}
	files[manifestName] = []byte(sums.String())
	return files, nil
}
