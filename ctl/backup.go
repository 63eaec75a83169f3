package ctl

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/retrieval"
)

func backupCommand() *cli.Command {
	return &cli.Command{
		Name:  "backup",
		Usage: "write an encrypted backup of an instance, while the server runs",
		Description: "Writes one encrypted archive to FILE: a consistent snapshot of the database (SQLite's\n" +
			"VACUUM INTO, safe while the server writes; with store.backend: postgres, every table's\n" +
			"rows read in one REPEATABLE READ transaction beside the servers), the code index files,\n" +
			"config.yaml, the workspaces (every\n" +
			"conversation's tree and copy-on-write layer, whiteouts and overlay xattrs included)\n" +
			"and repos/ if present. Logs and overlay scratch dirs are left out.\n\n" +
			"The archive is encrypted (AES-256-GCM) with a key derived from auth.jwt_secret, or,\n" +
			"with --passphrase-stdin, from a passphrase read from standard input (Argon2id).\n" +
			"Restore it with codumentorctl restore.\n\n" +
			"Example: codumentorctl backup --instance /srv/codumentor --out /backups/$(date +%F).cbk",
		Flags: []cli.Flag{instanceFlag(),
			&cli.StringFlag{Name: "out", Usage: "write the backup to `FILE` (created 0600; must not exist)", TakesFile: true, Required: true},
			&cli.BoolFlag{Name: "passphrase-stdin", Usage: "encrypt with a passphrase read from the first line of standard input instead of auth.jwt_secret"},
		},
		Action: runBackup,
	}
}

func runBackup(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	inst, cfg, err := openConfig(cmd)
	if err != nil {
		return err
	}
	h := backupHeader{KDF: kdfJWT}
	secret := cfg.Auth.JWTSecret
	if cmd.Bool("passphrase-stdin") {
		h.KDF = kdfPassphrase
		if secret, err = readSecretLine(cmd, "passphrase"); err != nil {
			return err
		}
	} else if secret == "" {
		return exitWith(exitFailure, errors.New("auth.jwt_secret is not set, so there is no key to encrypt the backup with: give --passphrase-stdin, or set one with codumentorctl secrets rotate"))
	} else {
		h.KeyID = secrets.NewKeyring(secret, nil).KeyID()
	}

	tmp, err := os.MkdirTemp("", "codumentor-backup-")
	if err != nil {
		return exitWith(exitFailure, err)
	}
	defer os.RemoveAll(tmp)
	snapshot := filepath.Join(tmp, store.FileName)
	if cfg.Store.Backend == store.BackendPostgres {
		h.Store, snapshot = store.BackendPostgres, filepath.Join(tmp, dumpFile)
	}
	if err := snapshotDB(ctx, inst, snapshot); err != nil {
		return exitWith(exitFailure, err)
	}
	index, err := snapshotIndex(ctx, inst, tmp)
	if err != nil {
		return exitWith(exitFailure, err)
	}

	out := cmd.String("out")
	f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("backup: %w", err))
	}
	err = writeBackup(f, h, secret, inst, snapshot, index)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(out)
		return exitWith(exitFailure, fmt.Errorf("backup: %w", err))
	}
	fmt.Fprintf(cmd.Root().Writer, "backup of %s written to %s (key: %s)\n", inst.Dir, out, describeKey(h))
	return nil
}

func describeKey(h backupHeader) string {
	if h.KDF == kdfPassphrase {
		return "passphrase"
	}
	return "auth.jwt_secret with key ID " + h.KeyID
}

// readSecretLine reads the first line of standard input, without its
// line ending; an empty one is a usage error.
func readSecretLine(cmd *cli.Command, what string) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(cmd.Root().Reader, 4096)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", exitWith(exitFailure, fmt.Errorf("reading the %s: %w", what, err))
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", usageError(cmd, "no %s on standard input", what)
	}
	return line, nil
}

// snapshotDB writes a consistent copy of the instance's database to dst:
// VACUUM INTO reads in one transaction, beside a server that writes; a
// PostgreSQL database is dumped in one REPEATABLE READ transaction, beside
// the servers (dumpPostgres). The backup is an admin action, recorded
// first: the snapshot holds its own record.
func snapshotDB(ctx context.Context, inst config.Instance, dst string) error {
	db, err := openDatabase(ctx, inst, false)
	if err != nil {
		return unwrapExit(err)
	}
	defer store.Close(db)
	if err := audit.Migrate(db); err != nil {
		return err
	}
	if err := audit.Write(ctx, db, audit.Entry{Kind: audit.KindAdmin, User: auth.CommandLine, Data: map[string]string{"action": "backup"}}); err != nil {
		return err
	}
	if store.Backend(db) == store.BackendPostgres {
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = dumpPostgres(ctx, db, f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("snapshot of the PostgreSQL database: %w", err)
		}
		return nil
	}
	if err := db.WithContext(ctx).Exec("VACUUM INTO ?", dst).Error; err != nil {
		return fmt.Errorf("snapshot of the database: %w", err)
	}
	return nil
}

// snapshotIndex copies the embedded code index's files
// (data/index-N.db) that exist into dir, each by VACUUM INTO, after the
// database: a sync that goes on meanwhile leaves the copy holding more
// than the database records as indexed, which the next sync replaces;
// never less. The names of the copies.
func snapshotIndex(ctx context.Context, inst config.Instance, dir string) ([]string, error) {
	var out []string
	for i := range retrieval.Shards {
		src := filepath.Join(inst.DataDir(), retrieval.ShardFile(i))
		if _, err := os.Lstat(src); errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		db, err := retrieval.OpenShard(ctx, src)
		if err != nil {
			return nil, err
		}
		// Created 0600 first (VACUUM INTO takes an empty file): the
		// archive keeps the mode.
		dst := filepath.Join(dir, retrieval.ShardFile(i))
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			f.Close()
			_, err = db.ExecContext(ctx, "VACUUM INTO ?", dst)
		}
		db.Close()
		if err != nil {
			return nil, fmt.Errorf("snapshot of the code index: %w", err)
		}
		out = append(out, dst)
	}
	return out, nil
}

func writeBackup(w io.Writer, h backupHeader, secret string, inst config.Instance, snapshot string, index []string) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	sw, err := newSealWriter(bw, h, secret)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(sw)
	a := &archiver{tw: tw}
	if err := a.file(snapshot, "data/"+filepath.Base(snapshot)); err != nil {
		return err
	}
	for _, p := range index {
		if err := a.file(p, "data/"+filepath.Base(p)); err != nil {
			return err
		}
	}
	if err := a.file(inst.ConfigFile(), "config.yaml"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// The node's name: its conversations are at home under it.
	if err := a.file(filepath.Join(inst.DataDir(), "node_id"), "data/node_id"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, dir := range []string{"workspaces", "repos"} {
		if err := a.tree(filepath.Join(inst.Dir, dir), dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := sw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// archiver writes files into a tar stream, reading them by descriptor.
type archiver struct {
	tw *tar.Writer
}

// file archives the regular file at host path p (the operator's: the
// snapshot, config.yaml) as name.
func (a *archiver) file(p, name string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s is not a regular file", p)
	}
	return a.regular(f, &st, name)
}

// skipped says which parts of the instance's trees a backup leaves out:
// lock files (made again when needed).
func skipped(name string, st *unix.Stat_t) bool {
	return strings.HasSuffix(name, ".lock") && st.Mode&unix.S_IFMT == unix.S_IFREG && strings.Count(name, "/") <= 3
}

// scratch reports overlayfs's scratch dir of a layer
// (workspaces/layers/<id>/work): kept as an empty directory, since
// overlayfs wants it empty and its own entries are mode 000.
func scratch(name string) bool {
	parts := strings.Split(name, "/")
	return len(parts) == 4 && parts[0] == "workspaces" && parts[1] == "layers" && parts[3] == "work"
}

// tree archives the directory at host path p as name, walking by
// descriptors: each entry is opened relative to its parent with
// O_NOFOLLOW and checked with fstat, so a sandbox that swaps an entry for
// a symlink meanwhile cannot make the backup read outside the tree.
func (a *archiver) tree(p, name string) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return err
	}
	return a.dir(fd, &st, name)
}

// dir archives the open directory fd (which it closes), found as st, as
// name, then its entries.
func (a *archiver) dir(fd int, st *unix.Stat_t, name string) error {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	hdr := header(st, name+"/", tar.TypeDir)
	if err := xattrs(fd, hdr); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, n := range names {
		if err := a.entry(fd, n, name+"/"+n); err != nil {
			return err
		}
	}
	return nil
}

func (a *archiver) entry(dirfd int, base, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone meanwhile
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	if skipped(name, &st) {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if scratch(name) {
			return a.tw.WriteHeader(header(&st, name+"/", tar.TypeDir))
		}
		fd, restore, err := openEntry(dirfd, base, &st)
		if err != nil {
			return changed(name, err)
		}
		defer restore()
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return nil // swapped for something else meanwhile
		}
		return a.dir(fd, &st, name)
	case unix.S_IFREG:
		fd, restore, err := openEntry(dirfd, base, &st)
		if err != nil {
			return changed(name, err)
		}
		defer restore()
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil // swapped for something else meanwhile
		}
		return a.regular(f, &st, name)
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dirfd, base, buf)
		if err != nil {
			return changed(name, err)
		}
		hdr := header(&st, name, tar.TypeSymlink)
		hdr.Linkname = string(buf[:n])
		return a.tw.WriteHeader(hdr)
	case unix.S_IFCHR:
		// An overlay whiteout is a 0/0 character device; a sandbox can
		// make no other.
		if unix.Major(st.Rdev) != 0 || unix.Minor(st.Rdev) != 0 {
			return nil
		}
		hdr := header(&st, name, tar.TypeChar)
		return a.tw.WriteHeader(hdr)
	}
	return nil // sockets, FIFOs: nothing to keep
}

// openEntry opens the directory or regular file base in dirfd for
// reading, and sets st to it as found. A sandbox can take its owner's
// access away from what it wrote (chmod 000 a file, 0100 or 0400 a
// directory): an entry of this user's is then given the owner's read
// (and, a directory, search) access for the walk, through a descriptor
// of the entry, never a path resolved again, and restore puts its mode
// back. The archive keeps the mode as found.
func openEntry(dirfd int, base string, st *unix.Stat_t) (fd int, restore func(), err error) {
	restore = func() {}
	pfd, err := unix.Openat(dirfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, restore, err
	}
	if err := unix.Fstat(pfd, st); err != nil {
		unix.Close(pfd)
		return -1, restore, err
	}
	need, flags := uint32(0o400), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		need, flags = 0o500, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC
	case unix.S_IFREG:
	default:
		// A symlink (O_PATH opened the link itself) or a special file:
		// the caller sees st and passes over it.
		unix.Close(pfd)
		return -1, restore, unix.ELOOP
	}
	// The descriptor's /proc link reopens and changes this very entry
	// (fchmod refuses an O_PATH descriptor).
	self := "/proc/self/fd/" + strconv.Itoa(pfd)
	granted := st.Mode&need != need && st.Uid == uint32(os.Geteuid()) && unix.Chmod(self, st.Mode&0o7777|need) == nil
	fd, err = unix.Open(self, flags, 0)
	if granted {
		mode := st.Mode & 0o7777
		restore = func() {
			unix.Chmod(self, mode)
			unix.Close(pfd)
		}
	} else {
		unix.Close(pfd)
	}
	if err != nil {
		restore()
		return -1, func() {}, err
	}
	return fd, restore, nil
}

// changed passes over an entry that changed type under the walk (a
// symlink where a file was: ELOOP) or vanished.
func changed(name string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ENXIO) {
		return nil
	}
	return fmt.Errorf("%s: %w", name, err)
}

func header(st *unix.Stat_t, name string, typ byte) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     int64(st.Mode & 0o7777),
		ModTime:  time.Unix(st.Mtim.Unix()),
		Format:   tar.FormatPAX,
	}
}

// regular archives the open regular file f. A file that shrinks while it
// is read is padded with zeros to the size it had (the archive stays
// readable); one that grows is cut at it.
func (a *archiver) regular(f *os.File, st *unix.Stat_t, name string) error {
	hdr := header(st, name, tar.TypeReg)
	hdr.Size = st.Size
	if err := xattrs(int(f.Fd()), hdr); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(a.tw, io.LimitReader(f, st.Size))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if n < st.Size {
		_, err = io.CopyN(a.tw, zeros{}, st.Size-n)
	}
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// xattrNamespaces are the extended attributes a backup keeps: overlayfs
// marks opaque directories and redirects with user.overlay.* (bwrap's
// unprivileged overlay mounts with userxattr) or trusted.overlay.*.
var xattrNamespaces = []string{"user.", "trusted."}

// xattrs adds the extended attributes of fd to hdr.
func xattrs(fd int, hdr *tar.Header) error {
	buf := make([]byte, 64<<10)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		keep := false
		for _, ns := range xattrNamespaces {
			keep = keep || strings.HasPrefix(name, ns)
		}
		if !keep {
			continue
		}
		val := make([]byte, 64<<10)
		k, err := unix.Fgetxattr(fd, name, val)
		if err != nil {
			if errors.Is(err, unix.ENODATA) {
				continue
			}
			return fmt.Errorf("xattr %s: %w", name, err)
		}
		if hdr.PAXRecords == nil {
			hdr.PAXRecords = map[string]string{}
		}
		hdr.PAXRecords["SCHILY.xattr."+name] = string(val[:k])
	}
	return nil
}
