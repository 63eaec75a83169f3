package ctl

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
)

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "restore an instance from a backup, into an empty directory",
		Description: "Decrypts and unpacks a codumentorctl backup into DIR, which must be empty or not exist,\n" +
			"then checks the restored audit log's chain. The key: for a backup under auth.jwt_secret,\n" +
			"the secret from $" + config.EnvJWTSecret + " or the first line of standard input\n" +
			"(--key-stdin); for one under a passphrase, --passphrase-stdin.\n\n" +
			"The backup of a PostgreSQL deployment restores its database into the empty PostgreSQL\n" +
			"database --to names (its schema made by this version, every table's rows loaded in one\n" +
			"transaction, the row counts and the audit log's head checked against the backup's), and\n" +
			"the node's files into DIR. config.yaml is restored as it was: point store.postgres.dsn at\n" +
			"the restored database if it is another.\n\n" +
			"Example: codumentorctl restore --instance /srv/codumentor --in backup.cbk --passphrase-stdin < pass",
		Flags: []cli.Flag{instanceFlag(),
			&cli.StringFlag{Name: "in", Usage: "read the backup from `FILE`", TakesFile: true, Required: true},
			&cli.BoolFlag{Name: "passphrase-stdin", Usage: "read the backup's passphrase from the first line of standard input"},
			&cli.BoolFlag{Name: "key-stdin", Usage: "read the auth.jwt_secret the backup is encrypted under from the first line of standard input"},
			&cli.StringFlag{Name: "to", Usage: "restore a PostgreSQL deployment's database into the empty database `DSN` (without a password)"},
			&cli.StringFlag{Name: "password-env", Usage: "read --to's password from the environment variable `VAR`"},
		},
		Action: runRestore,
	}
}

func runRestore(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	if cmd.String("instance") == "" {
		return usageError(cmd, "no instance directory: give --instance DIR")
	}
	restored, err := config.NewInstance(cmd.String("instance"))
	if err != nil {
		return exitWith(exitFailure, err)
	}
	dir := restored.Dir
	if err := emptyDir(dir); err != nil {
		return exitWith(exitFailure, err)
	}
	f, err := os.Open(cmd.String("in"))
	if err != nil {
		return exitWith(exitFailure, err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	h, line, err := readBackupHeader(br)
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("%s: %w", cmd.String("in"), err))
	}
	var secret string
	switch {
	case h.KDF == kdfPassphrase && !cmd.Bool("passphrase-stdin"):
		return usageError(cmd, "this backup is encrypted with a passphrase: give --passphrase-stdin")
	case h.KDF == kdfPassphrase:
		secret, err = readSecretLine(cmd, "passphrase")
	case cmd.Bool("key-stdin"):
		secret, err = readSecretLine(cmd, "auth.jwt_secret")
	default:
		secret = os.Getenv(config.EnvJWTSecret)
		if secret == "" {
			return usageError(cmd, "this backup is encrypted under auth.jwt_secret with key ID %s: set $%s or give --key-stdin", h.KeyID, config.EnvJWTSecret)
		}
	}
	if err != nil {
		return err
	}
	var target *gorm.DB
	switch {
	case h.Store == store.BackendPostgres && cmd.String("to") == "":
		return usageError(cmd, "this is the backup of a PostgreSQL deployment: give --to DSN, the empty database to restore it into")
	case h.Store != store.BackendPostgres && cmd.String("to") != "":
		return usageError(cmd, "--to: this is the backup of an SQLite instance, restored into DIR alone")
	case h.Store == store.BackendPostgres:
		if target, err = openRestoreTarget(ctx, cmd); err != nil {
			return err
		}
		defer store.Close(target)
	}
	or, err := newOpenReader(br, h, line, secret)
	if err != nil {
		return exitWith(exitFailure, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return exitWith(exitFailure, err)
	}
	st, err := f.Stat()
	if err != nil {
		return exitWith(exitFailure, err)
	}
	written, err := unpack(or, dir, st.Size())
	if err != nil {
		if errors.Is(err, ErrBadKey) {
			err = fmt.Errorf("%w (encrypted under %s)", err, describeKey(h))
		}
		if written == 0 {
			return exitWith(exitFailure, fmt.Errorf("restore: %w; nothing was written to %s", err, dir))
		}
		return exitWith(exitFailure, fmt.Errorf("restore: %w; %s holds a partial restore: empty it before trying again", err, dir))
	}
	inst := config.Instance{Dir: dir}
	if err := inst.Init(); err != nil {
		return exitWith(exitFailure, err)
	}
	if target != nil {
		return restorePostgres(ctx, cmd, inst, h, secret, target)
	}
	db, err := store.Open(ctx, inst.Database())
	if err != nil {
		return exitWith(exitFailure, err)
	}
	defer store.Close(db)
	cfg, err := inst.Load("")
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("restored %s, but its configuration cannot be read: %w", dir, err))
	}
	if cfg.Auth.JWTSecret == "" && h.KDF != kdfPassphrase {
		cfg.Auth.JWTSecret = secret // the backup's key, given by environment or standard input
	}
	if err := audit.UseKeys(db, audit.NewKeys(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)); err != nil {
		return exitWith(exitFailure, err)
	}
	if err := audit.Migrate(db); err != nil {
		return exitWith(exitFailure, err)
	}
	n, err := audit.Verify(ctx, db)
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("restored %s, but its audit log does not verify: %w", dir, err))
	}
	fmt.Fprintf(cmd.Root().Writer, "restored %s from %s; audit log: %d records, chain intact\n", dir, cmd.String("in"), n)
	return nil
}

// emptyDir accepts a directory that does not exist or is empty.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s is not empty: restore only into an empty or new directory", dir)
	}
	return nil
}

// unpack writes the archive into dir through an os.Root: no entry can
// land outside it, whatever its name or the symlinks before it. It
// returns how many entries it wrote.
//
// A backup holds its files' bytes uncompressed, so the entries' sizes add
// up to less than the archive's size (archiveSize): an entry declaring
// more (a sparse one, say, whose holes would be written out as zeros) is
// refused before it is written, as is one the target filesystem has no
// room for. Symbolic links are refused outside the content trees of
// workspaces and snapshots, where they are data the server reads by
// descriptor: elsewhere (logs/, data/, a layer's own directory) the
// server would open a path through them, out of the instance.
func unpack(r io.Reader, dir string, archiveSize int64) (written int, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	var declared int64
	type dirMode struct {
		name string
		mode os.FileMode
	}
	var dirs []dirMode
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return written, err
		}
		written++
		name := strings.TrimSuffix(hdr.Name, "/")
		if !filepath.IsLocal(name) || path.Clean(name) != name {
			return written, fmt.Errorf("archive entry %q: not a relative path inside the instance", hdr.Name)
		}
		mode := os.FileMode(hdr.Mode & 0o777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return written, err
			}
			if err := setXattrs(root, name, hdr); err != nil {
				return written, err
			}
			dirs = append(dirs, dirMode{name, mode})
		case tar.TypeReg:
			declared += hdr.Size
			if hdr.Size < 0 || declared > archiveSize {
				return written, fmt.Errorf("archive entry %q declares %d bytes, more than the archive (%d bytes) holds: not a backup codumentorctl wrote", hdr.Name, hdr.Size, archiveSize)
			}
			if err := roomFor(root, hdr.Size); err != nil {
				return written, fmt.Errorf("archive entry %q: %w", hdr.Name, err)
			}
			if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
				return written, err
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return written, err
			}
			_, err = io.Copy(f, tr)
			if err == nil {
				err = xattrsTo(int(f.Fd()), hdr)
			}
			if err == nil {
				err = f.Chmod(mode)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = root.Chtimes(name, hdr.ModTime, hdr.ModTime)
			}
			if err != nil {
				return written, fmt.Errorf("%s: %w", name, err)
			}
		case tar.TypeSymlink:
			if !contentTree(name) {
				return written, fmt.Errorf("archive entry %q: a symbolic link outside a workspace's or snapshot's files (to %q): not a backup codumentorctl wrote", hdr.Name, hdr.Linkname)
			}
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return written, err
			}
		case tar.TypeChar:
			if hdr.Devmajor != 0 || hdr.Devminor != 0 {
				return written, fmt.Errorf("archive entry %q: a device other than an overlay whiteout (0/0)", hdr.Name)
			}
			parent, err := root.Open(path.Dir(name))
			if err != nil {
				return written, err
			}
			err = unix.Mknodat(int(parent.Fd()), path.Base(name), unix.S_IFCHR|uint32(mode), 0)
			parent.Close()
			if err != nil {
				return written, fmt.Errorf("%s: whiteout: %w", name, err)
			}
		default:
			return written, fmt.Errorf("archive entry %q: unexpected type %q", hdr.Name, hdr.Typeflag)
		}
	}
	// Modes last, deepest first: a read-only directory is filled before
	// it is closed.
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return written, err
		}
	}
	return written, nil
}

// contentTree says whether the archive entry name lies inside the files
// of a workspace layer, a setup layer, a conversation's tree or a
// repository snapshot (below the directory the server manages itself).
func contentTree(name string) bool {
	parts := strings.Split(name, "/")
	switch {
	case len(parts) >= 5 && parts[0] == "workspaces" && parts[1] == "layers" && parts[3] == "upper":
		return true
	case len(parts) >= 4 && parts[0] == "workspaces" && (parts[1] == "setups" || parts[1] == "trees"):
		return true
	case len(parts) >= 4 && parts[0] == "repos" && parts[1] == "snapshots":
		return true
	}
	return false
}

// roomFor refuses a file of size bytes that the filesystem of root has
// no room for, keeping 1% of it (at least 64 MiB) free besides.
func roomFor(root *os.Root, size int64) error {
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(d.Fd()), &fs); err != nil {
		return err
	}
	free := int64(fs.Bavail) * fs.Bsize
	keep := max(int64(fs.Blocks)*fs.Bsize/100, 64<<20)
	if size > free-keep {
		return fmt.Errorf("%d bytes do not fit: the target filesystem has %d bytes free", size, free)
	}
	return nil
}

func setXattrs(root *os.Root, name string, hdr *tar.Header) error {
	f, err := root.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	return xattrsTo(int(f.Fd()), hdr)
}

// xattrsTo sets the extended attributes hdr records on fd.
func xattrsTo(fd int, hdr *tar.Header) error {
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		if err := unix.Fsetxattr(fd, name, []byte(v), 0); err != nil {
			return fmt.Errorf("%s: xattr %s: %w", hdr.Name, name, err)
		}
	}
	return nil
}

// openRestoreTarget opens --to, refusing a database that has tables
// before anything is unpacked (fillPostgres checks again, in its
// transaction).
func openRestoreTarget(ctx context.Context, cmd *cli.Command) (*gorm.DB, error) {
	c, _, err := targetConfig(cmd)
	if err != nil {
		return nil, err
	}
	db, err := store.OpenConfig(ctx, c)
	if err != nil {
		return nil, exitWith(exitFailure, fmt.Errorf("the target database: %w; nothing was written", err))
	}
	if err := checkEmpty(db.WithContext(ctx)); err != nil {
		store.Close(db)
		return nil, exitWith(exitFailure, fmt.Errorf("restore: %w; nothing was written", err))
	}
	return db, nil
}

// restorePostgres loads the unpacked instance's dump into target, checks
// it (row counts, the audit log's chain to the backup's head) and
// removes the dump.
func restorePostgres(ctx context.Context, cmd *cli.Command, inst config.Instance, h backupHeader, secret string, target *gorm.DB) error {
	partial := fmt.Errorf("%s holds the restored files: empty it before trying again; the database --to names is as empty as it was", inst.Dir)
	cfg, err := inst.Load("")
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("restored the files, but the configuration cannot be read: %w; %w", err, partial))
	}
	if cfg.Auth.JWTSecret == "" && h.KDF != kdfPassphrase {
		cfg.Auth.JWTSecret = secret
	}
	if err := audit.UseKeys(target, audit.NewKeys(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)); err != nil {
		return exitWith(exitFailure, err)
	}
	path := filepath.Join(inst.DataDir(), dumpFile)
	f, err := os.Open(path)
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("the backup holds no database dump: %w; %w", err, partial))
	}
	defer f.Close()
	var tr dumpTrailer
	err = fillPostgres(ctx, target, func(t *pgTarget) error {
		var err error
		tr, err = loadDump(ctx, t, f)
		return err
	}, func(t *pgTarget) error {
		head, err := tr.head()
		if err != nil {
			return err
		}
		return t.verifyCopy(ctx, tr.tableCounts(), tr.AuditRecords, head)
	})
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("restore: loading the database: %w; %w", err, partial))
	}
	f.Close()
	if err := os.Remove(path); err != nil {
		return exitWith(exitFailure, err)
	}
	rows := int64(0)
	for _, n := range tr.Counts {
		rows += n
	}
	w := cmd.Root().Writer
	fmt.Fprintf(w, "restored %s from %s, its database into PostgreSQL (%s, %d rows, counts as backed up); audit log: %d records, chain intact\n",
		inst.Dir, cmd.String("in"), plural(len(tr.Counts), "table", "tables"), rows, tr.AuditRecords)
	if cfg.Store.Postgres.DSN != cmd.String("to") {
		fmt.Fprintf(w, "config.yaml names store.postgres.dsn %s: set it to %s to serve the restored database\n", strconv.Quote(cfg.Store.Postgres.DSN), strconv.Quote(cmd.String("to")))
	}
	return nil
}
