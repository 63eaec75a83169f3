package ctl_test

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ctlpkg "github.com/codumentor/codumentor/ctl"
)

// A validly encrypted archive that codumentorctl backup never writes is
// refused before it does harm: a symbolic link out of the instance where
// the server opens paths by name (the next server start would append its
// log to the outside file), and a sparse entry declaring far more than
// the archive holds (written out, its holes would fill a small disk).
func TestRestoreRefusesHostileArchives(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "outside.log")
	for _, c := range []struct {
		name  string
		tar   []byte
		says  string
		check func(t *testing.T, dst string)
	}{
		{
			name: "log symlink out of the instance",
			tar: tarOf(t, func(tw *tar.Writer) {
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "logs/", Mode: 0o700})
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "logs/codumentor.log", Linkname: outside})
			}),
			says: "symbolic link outside",
			check: func(t *testing.T, dst string) {
				if _, err := os.Lstat(filepath.Join(dst, "logs", "codumentor.log")); err == nil {
					t.Error("the link was made")
				}
			},
		},
		{
			name: "layer directory symlink",
			tar: tarOf(t, func(tw *tar.Writer) {
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "workspaces/layers/", Mode: 0o700})
				tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "workspaces/layers/conv_x", Linkname: "/etc"})
			}),
			says: "symbolic link outside",
		},
		{
			name: "sparse entry of 200 MB",
			tar:  sparseTar(t, "data/codumentor.db", 200<<20),
			says: "more than the archive",
			check: func(t *testing.T, dst string) {
				if fi, err := os.Stat(filepath.Join(dst, "data", "codumentor.db")); err == nil {
					t.Errorf("the entry was written: %d bytes", fi.Size())
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := ctlpkg.SealBackup(&b, "pass phrase", c.tar); err != nil {
				t.Fatal(err)
			}
			f := filepath.Join(t.TempDir(), "hostile.cbk")
			os.WriteFile(f, b.Bytes(), 0o600)
			dst := filepath.Join(t.TempDir(), "restored")
			r := run{args: []string{"restore", "--instance", dst, "--in", f, "--passphrase-stdin"}, stdin: "pass phrase\n"}.do(t)
			if r.code != 1 || !strings.Contains(r.stderr, c.says) {
				t.Fatalf("restore: %v; want exit 1 saying %q", r, c.says)
			}
			if _, err := os.Stat(outside); err == nil {
				t.Error("a file outside the instance was created")
			}
			if c.check != nil {
				c.check(t, dst)
			}
		})
	}
}

// A wrong key opens nothing: restore says that nothing was written, not
// that the directory may hold a partial restore.
func TestRestoreWrongKeyWroteNothing(t *testing.T) {
	_, file := backupInstance(t)
	dst := filepath.Join(t.TempDir(), "restored")
	r := run{args: []string{"restore", "--instance", dst, "--in", file, "--passphrase-stdin"}, stdin: "wrong phrase\n"}.do(t)
	if r.code != 1 || !strings.Contains(r.stderr, "nothing was written") || strings.Contains(r.stderr, "partial") {
		t.Fatalf("restore with a wrong passphrase: %v", r)
	}
}

func tarOf(t *testing.T, write func(*tar.Writer)) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	write(tw)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sparseTar is a tar stream of one PAX (GNU 1.0) sparse file of size
// bytes holding a single byte at its end. archive/tar reads such files
// but does not write them, so the blocks are made here.
func sparseTar(t *testing.T, name string, size int64) []byte {
	t.Helper()
	var b bytes.Buffer
	rec := func(k, v string) string {
		s := fmt.Sprintf(" %s=%s\n", k, v)
		n := len(s) + 1
		for len(fmt.Sprint(n))+len(s) != n {
			n++
		}
		return fmt.Sprint(n) + s
	}
	pax := rec("GNU.sparse.major", "1") + rec("GNU.sparse.minor", "0") + rec("GNU.sparse.name", name) + rec("GNU.sparse.realsize", fmt.Sprint(size))
	block(&b, ustar("PaxHeaders/x", 'x', int64(len(pax))), []byte(pax))
	sparseMap := fmt.Sprintf("1\n%d\n1\n", size-1)
	data := make([]byte, 512+1)
	copy(data, sparseMap)
	data[512] = 'x'
	block(&b, ustar("GNUSparseFile.0/x", '0', int64(len(data))), data)
	b.Write(make([]byte, 1024))
	return b.Bytes()
}

// block writes a 512-byte header and data padded to whole blocks.
func block(b *bytes.Buffer, hdr [512]byte, data []byte) {
	b.Write(hdr[:])
	b.Write(data)
	if r := len(data) % 512; r != 0 {
		b.Write(make([]byte, 512-r))
	}
}

// ustar is a USTAR header block: name, type and size, mode 0600.
func ustar(name string, typ byte, size int64) [512]byte {
	var h [512]byte
	copy(h[0:100], name)
	copy(h[100:108], "0000600\x00")
	copy(h[108:116], "0000000\x00")
	copy(h[116:124], "0000000\x00")
	copy(h[124:136], fmt.Sprintf("%011o\x00", size))
	copy(h[136:148], "00000000000\x00")
	h[156] = typ
	copy(h[257:263], "ustar\x00")
	copy(h[263:265], "00")
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}
