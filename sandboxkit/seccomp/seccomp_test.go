package seccomp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// The embedded blobs are what the generator writes today, byte for
// byte: a rule cannot change without its blob.
func TestBlobsMatchGenerator(t *testing.T) {
	want, err := Blobs()
	if err != nil {
		t.Fatal(err)
	}
	ents, err := fs.ReadDir(blobs, "blobs")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		if e.Name() == "README.md" {
			continue
		}
		got = append(got, e.Name())
		b, _ := fs.ReadFile(blobs, "blobs/"+e.Name())
		if w, ok := want[e.Name()]; !ok {
			t.Errorf("blobs/%s is not written by the generator; delete it", e.Name())
		} else if !bytes.Equal(b, w) {
			t.Errorf("blobs/%s differs from the generator's output; run go generate ./... in sandboxkit", e.Name())
		}
	}
	for name := range want {
		if !slices.Contains(got, name) {
			t.Errorf("blobs/%s missing; run go generate ./... in sandboxkit", name)
		}
	}
}

func TestLoadThisArch(t *testing.T) {
	for _, m := range []Mode{Log, Enforce} {
		f, err := Load(m)
		if err != nil {
			t.Fatalf("Load(%s): %v", m, err)
		}
		sum := sha256.Sum256(f.Program)
		if f.Digest != hex.EncodeToString(sum[:]) || f.Mode != m || len(f.Program)%8 != 0 {
			t.Errorf("Load(%s) = %+v", m, f)
		}
	}
	if f, err := Load(Off); f != nil || err != nil {
		t.Errorf("Load(off) = %v, %v; want no filter and no error", f, err)
	}
}

// A damaged or missing blob is an error wrapping ErrNoFilter, never a
// nil filter that would let a sandbox run unfiltered.
func TestLoadFailsClosed(t *testing.T) {
	good, err := Generate("amd64", Enforce)
	if err != nil {
		t.Fatal(err)
	}
	sumOf := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	files := func(prog []byte, sum string) fstest.MapFS {
		fsys := fstest.MapFS{"b/" + manifestName: {Data: []byte(sum + "  amd64.enforce.bpf\n")}}
		if prog != nil {
			fsys["b/amd64.enforce.bpf"] = &fstest.MapFile{Data: prog}
		}
		return fsys
	}
	flipped := bytes.Clone(good)
	flipped[13] ^= 0x40
	badOp := bytes.Clone(good)
	badOp[8] = 0x07 // an opcode the filter never uses (BPF_MISC)
	cases := []struct {
		name string
		fsys fstest.MapFS
		m    Mode
		want string
	}{
		{"fail_missing_blob", files(nil, sumOf(good)), Enforce, "no filter exists for this architecture"},
		{"fail_truncated", files(good[:len(good)-3], sumOf(good[:len(good)-3])), Enforce, "not a whole number of 8-byte instructions"},
		{"fail_bit_flip", files(flipped, sumOf(good)), Enforce, "does not match the manifest"},
		{"fail_unknown_opcode", files(badOp, sumOf(badOp)), Enforce, "opcode 0x7"},
		{"fail_no_manifest", fstest.MapFS{"b/amd64.enforce.bpf": {Data: good}}, Enforce, "manifest"},
		{"fail_not_in_manifest", fstest.MapFS{"b/amd64.enforce.bpf": {Data: good}, "b/" + manifestName: {Data: []byte("")}}, Enforce, "not listed"},
		{"fail_mode", files(good, sumOf(good)), Mode("strict"), "unknown mode"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := load(c.fsys, "b", "amd64", c.m)
			if f != nil || !errors.Is(err, ErrNoFilter) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("load = %v, %v; want ErrNoFilter saying %q", f, err, c.want)
			}
		})
	}
	if f, err := load(files(good, sumOf(good)), "b", "amd64", Enforce); err != nil || !bytes.Equal(f.Program, good) {
		t.Fatalf("good blob: %v", err)
	}
}

func TestValidate(t *testing.T) {
	good, _ := Generate("amd64", Log)
	noArch := encode([]insn{{code: bpfLdWAbs, k: offNr}, {code: bpfRetK, k: retAllow}})
	runOff := encode([]insn{{code: bpfLdWAbs, k: offArch}, {code: bpfLdWAbs, k: offNr}})
	farJump := encode([]insn{{code: bpfLdWAbs, k: offArch}, {code: bpfJeqK, k: 1, jt: 5}, {code: bpfRetK}})
	badLoad := encode([]insn{{code: bpfLdWAbs, k: offArch}, {code: bpfLdWAbs, k: 64}, {code: bpfRetK}})
	for _, c := range []struct {
		name string
		prog []byte
		want string
	}{
		{"good", good, ""},
		{"empty", nil, "not a whole number"},
		{"ragged", make([]byte, 12), "not a whole number"},
		{"no arch check", noArch, "architecture"},
		{"runs off the end", runOff, "run off its end"},
		{"jump past the end", farJump, "jumps past the end"},
		{"load outside seccomp_data", badLoad, "outside seccomp_data"},
		{"too long", make([]byte, 8*(bpfMaxInsns+1)), "instructions"},
	} {
		err := Validate(c.prog)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: Validate = %v, want %q", c.name, err, c.want)
		}
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": Log, "log": Log, "enforce": Enforce, "off": Off} {
		if m, err := ParseMode(in); m != want || err != nil {
			t.Errorf("ParseMode(%q) = %q, %v", in, m, err)
		}
	}
	if _, err := ParseMode("notify"); err == nil {
		t.Error("ParseMode accepted the probe's internal mode")
	}
}

// verdicts the emulator compares against.
func wantFor(m Mode, e errno) uint32 {
	a, _ := actionsFor(m)
	return a.deny(e)
}

// Every rule, on every table of every architecture, in every mode:
// the whole matrix, through an interpreter of the generated program.
func TestFilterMatrix(t *testing.T) {
	for _, goarch := range Archs() {
		a := archs[goarch]
		for _, m := range []Mode{Enforce, Log, notify} {
			prog, err := Generate(goarch, m)
			if err != nil {
				t.Fatal(err)
			}
			act, _ := actionsFor(m)
			for _, t2 := range []abi{a.native, a.compat} {
				check := func(what string, d seccompData, want uint32) {
					t.Helper()
					d.arch = t2.audit
					got, err := run(prog, d)
					if err != nil || got != want {
						t.Errorf("%s/%s/%s: %s: got %#x (%v), want %#x", goarch, m, t2.name, what, got, err, want)
					}
				}
				for _, r := range rules {
					nr, ok := t2.nr[r.name]
					if !ok {
						continue
					}
					deny := wantFor(m, r.errno)
					sys := func(args ...uint64) seccompData {
						d := seccompData{nr: nr}
						copy(d.args[:], args)
						return d
					}
					switch r.name {
					case "clone":
						check("clone(CLONE_NEWUSER)", sys(cloneNewUser), deny)
						check("clone(1<<32|CLONE_NEWUSER)", sys(1<<32|cloneNewUser), deny)
						check("clone(thread)", sys(0x3d0f00), retAllow)
						check("clone(1<<60, fork)", sys(1<<60|17), retAllow)
					case "ioctl":
						check("ioctl(TIOCSTI)", sys(0, tiocsti), deny)
						check("ioctl(TIOCLINUX)", sys(0, tioclinux), deny)
						check("ioctl(TIOCSETD)", sys(0, tiocsetd), deny)
						check("ioctl(1<<32|TIOCSTI)", sys(0, 1<<32|tiocsti), deny)
						check("ioctl(1<<32|TIOCSETD)", sys(0, 1<<32|tiocsetd), deny)
						check("ioctl(TIOCGETD)", sys(0, 0x5424), retAllow)
						check("ioctl(TCGETS)", sys(0, 0x5401), retAllow)
						check("ioctl(FIONREAD)", sys(0, 0x541B), retAllow)
					case "personality":
						check("personality(query)", sys(0xffffffff), retAllow)
						check("personality(query, high bits)", sys(0xffffffffffffffff), retAllow)
						check("personality(PER_LINUX)", sys(perLinux), retAllow)
						check("personality(PER_LINUX32)", sys(perLinux32), retAllow)
						check("personality(1<<32|PER_LINUX32)", sys(1<<32|perLinux32), retAllow)
						check("personality(ADDR_NO_RANDOMIZE)", sys(0x0040000), deny)
						check("personality(PER_LINUX32|ADDR_NO_RANDOMIZE)", sys(0x0040008), deny)
						check("personality(1<<32|ADDR_NO_RANDOMIZE)", sys(1<<32|0x0040000), deny)
					case "socket":
						// A refused family answers EAFNOSUPPORT, as a
						// family the kernel lacks (what probing programs
						// expect), whatever the rule table says.
						noFamily := wantFor(m, eafnosupport)
						for _, fam := range []uint64{afUnix, afInet, afInet6, afNetlink} {
							check(fmt.Sprintf("socket(%d)", fam), sys(fam, 1), retAllow)
						}
						check("socket(AF_ALG)", sys(38, 5), noFamily)
						check("socket(AF_VSOCK)", sys(40, 1), noFamily)
						check("socket(AF_PACKET)", sys(17, 3), noFamily)
						check("socket(1<<32|AF_ALG)", sys(1<<32|38, 5), noFamily)
						check("socket(1<<32|AF_INET)", sys(1<<32|afInet, 1), retAllow)
					case "socketpair":
						check("socketpair(AF_UNIX)", sys(afUnix, 1), retAllow)
						check("socketpair(1<<32|AF_UNIX)", sys(1<<32|afUnix, 1), retAllow)
						for _, fam := range []uint64{afInet, afInet6, afNetlink, afVsock, 30 /* AF_TIPC */, 1<<32 | afVsock} {
							check(fmt.Sprintf("socketpair(%#x)", fam), sys(fam, 1), wantFor(m, eafnosupport))
						}
					case "socketcall":
						check("socketcall(SYS_SOCKET)", sys(sysSocket, 0x1000), deny)
						check("socketcall(SYS_SOCKETPAIR)", sys(sysSocketpair, 0x1000), deny)
						check("socketcall(SYS_CONNECT)", sys(3, 0x1000), retAllow)
					case "prctl":
						check("prctl(PR_SET_MM)", sys(prSetMM, 1), deny)
						check("prctl(1<<32|PR_SET_MM)", sys(1<<32|prSetMM, 1), deny)
						check("prctl(PR_SET_NAME)", sys(15, 0x1000), retAllow)
						check("prctl(PR_SET_NO_NEW_PRIVS)", sys(38, 1), retAllow)
					default:
						if r.test != nil {
							t.Fatalf("rule %s has an argument test this matrix does not cover", r.name)
						}
						check(r.name, sys(1, 2, 3, 4, 5, 6), deny)
					}
				}
				check("an unlisted call (number 0)", seccompData{nr: 0}, retAllow)
				check("the last reviewed number", seccompData{nr: t2.reviewed}, retAllow)
				check("the first unreviewed number", seccompData{nr: t2.reviewed + 1}, wantFor(m, enosys))
				check("number 1023", seccompData{nr: 1023}, wantFor(m, enosys))
				if t2.private[1] > 0 {
					check("ARM set_tls (private)", seccompData{nr: 0x0f0005}, retAllow)
					check("past the private range", seccompData{nr: t2.private[1]}, wantFor(m, enosys))
				}
				if a.x32 && t2.audit == a.native.audit {
					check("x32 getpid", seccompData{nr: x32Bit | 39}, act.x32)
					check("x32 unshare", seccompData{nr: x32Bit | 272}, act.x32)
					check("nr -1", seccompData{nr: 0xffffffff}, act.x32)
				}
			}
			got, _ := run(prog, seccompData{nr: 0, arch: 0x4000003E /* x86_64 LE without 64-bit flag: unknown */})
			if got != act.foreign {
				t.Errorf("%s/%s: unknown arch: %#x, want %#x", goarch, m, got, act.foreign)
			}
		}
	}
}

// Every table entry names a rule, every rule is in some table.
func TestTablesNameRules(t *testing.T) {
	used := map[string]bool{}
	for goarch, a := range archs {
		for _, t2 := range []abi{a.native, a.compat} {
			for name := range t2.nr {
				if !slices.ContainsFunc(rules, func(r rule) bool { return r.name == name }) {
					t.Errorf("%s/%s: %s has a number but no rule", goarch, t2.name, name)
				}
				used[name] = true
			}
		}
	}
	for _, r := range rules {
		if !used[r.name] {
			t.Errorf("rule %s has no number on any architecture", r.name)
		}
		if r.why == "" {
			t.Errorf("rule %s does not say what it closes", r.name)
		}
	}
}

// Every reviewed number that no rule names is allowed, on every table,
// and every number above is refused with ENOSYS: the search over the
// numbers has no hole and no stray refusal.
func TestFilterAllowsUnlisted(t *testing.T) {
	for _, goarch := range Archs() {
		a := archs[goarch]
		prog, err := Generate(goarch, Enforce)
		if err != nil {
			t.Fatal(err)
		}
		for _, t2 := range []abi{a.native, a.compat} {
			listed := map[uint32]bool{}
			for _, nr := range t2.nr {
				listed[nr] = true
			}
			for nr := uint32(0); nr < 1024; nr++ {
				got, err := run(prog, seccompData{nr: nr, arch: t2.audit})
				switch {
				case err != nil:
					t.Fatalf("%s/%s nr %d: %v", goarch, t2.name, nr, err)
				case nr > t2.reviewed:
					if got != wantFor(Enforce, enosys) {
						t.Errorf("%s/%s: unreviewed nr %d gets %#x, want ENOSYS", goarch, t2.name, nr, got)
					}
				case !listed[nr] && got != retAllow:
					t.Errorf("%s/%s: unlisted nr %d gets %#x", goarch, t2.name, nr, got)
				case listed[nr] && got == retAllow && !hasArgTest(t2, nr):
					t.Errorf("%s/%s: listed nr %d is allowed", goarch, t2.name, nr)
				}
			}
		}
	}
}

func hasArgTest(t abi, nr uint32) bool {
	for _, r := range rules {
		if n, ok := t.nr[r.name]; ok && n == nr {
			return r.test != nil
		}
	}
	return false
}

// The reviewed number covers every number a table names: a rule for a
// call above it would be dead code behind the ENOSYS refusal.
func TestReviewedCoversTables(t *testing.T) {
	for goarch, a := range archs {
		for _, t2 := range []abi{a.native, a.compat} {
			for name, nr := range t2.nr {
				if nr > t2.reviewed {
					t.Errorf("%s/%s: %s (%d) is above the reviewed %d", goarch, t2.name, name, nr, t2.reviewed)
				}
			}
		}
	}
}
