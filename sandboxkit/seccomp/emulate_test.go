package seccomp

import (
	"encoding/binary"
	"fmt"
)

// seccompData is struct seccomp_data.
type seccompData struct {
	nr   uint32
	arch uint32
	args [6]uint64
}

func (d seccompData) bytes() []byte {
	b := make([]byte, 64)
	binary.LittleEndian.PutUint32(b[0:], d.nr)
	binary.LittleEndian.PutUint32(b[4:], d.arch)
	for i, a := range d.args {
		binary.LittleEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// run interprets a filter as the kernel does, for the instructions
// check admits, and returns its verdict.
func run(prog []byte, d seccompData) (uint32, error) {
	p, err := decode(prog)
	if err != nil {
		return 0, err
	}
	if err := check(p); err != nil {
		return 0, err
	}
	data := d.bytes()
	var acc uint32
	for pc := 0; pc < len(p); pc++ {
		i := p[pc]
		switch i.code {
		case bpfLdWAbs:
			acc = binary.LittleEndian.Uint32(data[i.k:])
		case bpfJa:
			pc += int(i.k)
		case bpfJeqK, bpfJgeK, bpfJsetK:
			var ok bool
			switch i.code {
			case bpfJeqK:
				ok = acc == i.k
			case bpfJgeK:
				ok = acc >= i.k
			case bpfJsetK:
				ok = acc&i.k != 0
			}
			if ok {
				pc += int(i.jt)
			} else {
				pc += int(i.jf)
			}
		case bpfRetK:
			return i.k, nil
		}
	}
	return 0, fmt.Errorf("ran off the end")
}
