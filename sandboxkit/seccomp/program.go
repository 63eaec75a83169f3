package seccomp

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync"
)

//go:generate go run ./internal/mkblobs

// Mode says what a filter does with a call on the blocklist.
type Mode string

const (
	// Log lets the call run and has the kernel log it (SECCOMP_RET_LOG,
	// subject to /proc/sys/kernel/seccomp/actions_logged). The default:
	// it shows what enforce would break, and breaks nothing.
	Log Mode = "log"
	// Enforce refuses the call with EPERM (ENOSYS where libc must fall
	// back), refuses every x32 call, and kills a process that calls
	// through an architecture the filter does not know.
	Enforce Mode = "enforce"
	// Off loads no filter.
	Off Mode = "off"

	// notify is the probe's own filter (probe.go), never a blob.
	notify Mode = "notify"
)

// Modes lists the modes a sandbox can be configured with.
var Modes = []Mode{Log, Enforce, Off}

// ParseMode parses a configured mode; the empty string is Log, the
// default.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return Log, nil
	case Log, Enforce, Off:
		return m, nil
	}
	return "", fmt.Errorf("seccomp: unknown mode %q (want log, enforce or off)", s)
}

// ErrNoFilter means the filter for this architecture and mode cannot be
// provided: the blob is missing, damaged, or does not match its
// manifest. A caller that asked for a filter must not run the sandbox
// without one.
var ErrNoFilter = errors.New("seccomp filter unavailable")

//go:embed blobs
var blobs embed.FS

// manifestName lists "sha256  file" for every blob, as sha256sum does.
const manifestName = "SHA256SUMS"

// BlobName is the file name of the blob for goarch and m, in blobs/.
func BlobName(goarch string, m Mode) string { return goarch + "." + string(m) + ".bpf" }

// Filter is a verified BPF program, ready for Policy.Seccomp.
type Filter struct {
	Mode Mode
	Arch string // GOARCH
	// Program is the struct sock_filter array bwrap loads.
	Program []byte
	// Digest is the SHA-256 of Program, hex.
	Digest string
}

// loaded caches the verified blobs of this process, per mode: the
// embedded bytes never change, so verifying them once is enough.
var loaded sync.Map // Mode -> loadResult

type loadResult struct {
	f   *Filter
	err error
}

// Load returns the verified filter for this machine's architecture.
// Off returns nil and no error. Errors wrap ErrNoFilter.
func Load(m Mode) (*Filter, error) {
	if m == Off {
		return nil, nil
	}
	if v, ok := loaded.Load(m); ok {
		r := v.(loadResult)
		return r.f, r.err
	}
	f, err := load(blobs, "blobs", runtime.GOARCH, m)
	loaded.Store(m, loadResult{f, err})
	return f, err
}

// load reads the blob for goarch and m from fsys under dir, checks it
// against the manifest and verifies the program.
func load(fsys fs.FS, dir, goarch string, m Mode) (*Filter, error) {
	if m != Log && m != Enforce {
		return nil, fmt.Errorf("%w: unknown mode %q", ErrNoFilter, m)
	}
	name := BlobName(goarch, m)
	fail := func(format string, a ...any) (*Filter, error) {
		return nil, fmt.Errorf("%w: %s: %s", ErrNoFilter, name, fmt.Sprintf(format, a...))
	}
	prog, err := fs.ReadFile(fsys, dir+"/"+name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fail("no filter exists for this architecture")
		}
		return fail("%v", err)
	}
	sums, err := fs.ReadFile(fsys, dir+"/"+manifestName)
	if err != nil {
		return fail("manifest: %v", err)
	}
	want, ok := manifest(sums)[name]
	if !ok {
		return fail("not listed in %s", manifestName)
	}
	sum := sha256.Sum256(prog)
	got := hex.EncodeToString(sum[:])
	if got != want {
		return fail("SHA-256 %s does not match the manifest's %s", got[:16], want[:min(16, len(want))])
	}
	if err := Validate(prog); err != nil {
		return fail("%v", err)
	}
	return &Filter{Mode: m, Arch: goarch, Program: prog, Digest: got}, nil
}

// manifest parses sha256sum output.
func manifest(b []byte) map[string]string {
	m := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if ok {
			m[file] = sum
		}
	}
	return m
}

// Validate checks that prog is a filter this package could have
// written: whole instructions, known opcodes, loads inside
// seccomp_data, jumps inside the program, an architecture check first
// and a return last. It does not prove what the filter refuses; the
// manifest and the probe suite do.
func Validate(prog []byte) error {
	p, err := decode(prog)
	if err != nil {
		return fmt.Errorf("seccomp program: %w", err)
	}
	if err := check(p); err != nil {
		return fmt.Errorf("seccomp program: %w", err)
	}
	return nil
}
