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
	"strings"

	"github.com/urfave/cli/v3"
	"golang.org/x/sys/unix"

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
			"Example: codumentorctl restore --instance /srv/codumentor --in backup.cbk --passphrase-stdin < pass",
		Flags: []cli.Flag{instanceFlag(),
			&cli.StringFlag{Name: "in", Usage: "read the backup from `FILE`", TakesFile: true, Required: true},
			&cli.BoolFlag{Name: "passphrase-stdin", Usage: "read the backup's passphrase from the first line of standard input"},
			&cli.BoolFlag{Name: "key-stdin", Usage: "read the auth.jwt_secret the backup is encrypted under from the first line of standard input"},
		},
		Action: runRestore,
	}
}

func runRestore(ctx context.Context, cmd *cli.Command) error {
	if cmd.Args().Present() {
		return usageError(cmd, "unexpected argument %q", cmd.Args().First())
	}
	dir := cmd.String("instance")
	if dir == "" {
		return usageError(cmd, "no instance directory: give --instance DIR")
	}
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
	or, err := newOpenReader(br, h, line, secret)
	if err != nil {
		return exitWith(exitFailure, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return exitWith(exitFailure, err)
	}
	if err := unpack(or, dir); err != nil {
		if errors.Is(err, ErrBadKey) {
			err = fmt.Errorf("%w (encrypted under %s)", err, describeKey(h))
		}
		return exitWith(exitFailure, fmt.Errorf("restore: %w; %s may hold a partial restore: empty it before trying again", err, dir))
	}
	inst := config.Instance{Dir: dir}
	if err := inst.Init(); err != nil {
		return exitWith(exitFailure, err)
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
// land outside it, whatever its name or the symlinks before it.
func unpack(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
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
			return err
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !filepath.IsLocal(name) || path.Clean(name) != name {
			return fmt.Errorf("archive entry %q: not a relative path inside the instance", hdr.Name)
		}
		mode := os.FileMode(hdr.Mode & 0o777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o700); err != nil {
				return err
			}
			if err := setXattrs(root, name, hdr); err != nil {
				return err
			}
			dirs = append(dirs, dirMode{name, mode})
		case tar.TypeReg:
			if err := root.MkdirAll(path.Dir(name), 0o700); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
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
				return fmt.Errorf("%s: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := root.Symlink(hdr.Linkname, name); err != nil {
				return err
			}
		case tar.TypeChar:
			if hdr.Devmajor != 0 || hdr.Devminor != 0 {
				return fmt.Errorf("archive entry %q: a device other than an overlay whiteout (0/0)", hdr.Name)
			}
			parent, err := root.Open(path.Dir(name))
			if err != nil {
				return err
			}
			err = unix.Mknodat(int(parent.Fd()), path.Base(name), unix.S_IFCHR|uint32(mode), 0)
			parent.Close()
			if err != nil {
				return fmt.Errorf("%s: whiteout: %w", name, err)
			}
		default:
			return fmt.Errorf("archive entry %q: unexpected type %q", hdr.Name, hdr.Typeflag)
		}
	}
	// Modes last, deepest first: a read-only directory is filled before
	// it is closed.
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
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
