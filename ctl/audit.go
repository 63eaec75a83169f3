package ctl

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v3"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
)

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "export and verify the tamper-evident audit log",
		Description: "The server records logins, approvals, sandbox launches, secrets (by name), admin actions\n" +
			"and its configuration at each start in a chain: each record carries a MAC (HMAC-SHA256\n" +
			"under a key derived from auth.jwt_secret) of its content and of the one before. Keep a\n" +
			"head (audit head, or the server log's \"audit head\" lines) where the server cannot write:\n" +
			"verify --head then shows the newest records deleted, or the log rewritten. These commands\n" +
			"only read, and are safe while the server runs.",
		Commands: []*cli.Command{auditExportCommand(), auditVerifyCommand(), auditHeadCommand()},
		Action:   groupAction,
	}
}

func auditExportCommand() *cli.Command {
	return &cli.Command{
		Name:  "export",
		Usage: "write the audit log as JSON lines",
		Description: "Writes one record per line, oldest first, to standard output. Keep exports where the\n" +
			"server cannot write: the newest record's hash pins everything before it.\n\n" +
			"Example: codumentorctl audit export --since 2026-11-01T00:00:00Z > audit.jsonl",
		Flags: []cli.Flag{instanceFlag(),
			&cli.StringFlag{Name: "since", Usage: "only records at or after `TIME` (RFC 3339)"},
			&cli.StringFlag{Name: "kind", Usage: "only records of `KIND` (login, approval, sandbox_launch, secret_create, ...)"},
		},
		Action: runAuditExport,
	}
}

func runAuditExport(ctx context.Context, cmd *cli.Command) error {
	var f audit.Filter
	if v := cmd.String("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return usageError(cmd, "--since %q is not an RFC 3339 time such as 2026-11-30T08:00:00Z", v)
		}
		f.Since = t
	}
	f.Kind = cmd.String("kind")
	inst, err := openInstance(cmd, false)
	if err != nil {
		return err
	}
	return withDatabase(ctx, inst, false, func(db *gorm.DB) error {
		w := bufio.NewWriter(cmd.Root().Writer)
		enc := json.NewEncoder(w)
		// Pages bound the memory a long log takes.
		f.Limit = 1000
		for {
			rs, err := audit.List(ctx, db, f)
			if err != nil {
				return err
			}
			for _, r := range rs {
				if err := enc.Encode(r); err != nil {
					return err
				}
			}
			if len(rs) < f.Limit {
				break
			}
			f.After = rs[len(rs)-1].Seq
		}
		return w.Flush()
	})
}

func auditVerifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check the audit log's hash chain",
		Description: "Reads every record in order and checks that none was edited, deleted, reordered or\n" +
			"re-chained without the key; names the first record where the chain breaks and exits 1.\n" +
			"With --head SEQ:MAC (from audit head or the server log's \"audit head\" lines, kept\n" +
			"elsewhere), also fails when the log no longer reaches that record unchanged: the newest\n" +
			"records deleted, or the log rewritten. Records MACed under an earlier secret verify with\n" +
			"auth.previous_jwt_secrets. With --file, checks an export (codumentorctl audit export)\n" +
			"instead of the instance's database, with the instance's keys.\n\n" +
			"Example: codumentorctl audit verify --head \"$(ssh logs grep -h 'audit head' codumentor.log | tail -1 | sed 's/.*head=//')\"",
		Flags: []cli.Flag{instanceFlag(),
			&cli.StringFlag{Name: "file", Usage: "verify the JSON lines export `FILE` (- for standard input)", TakesFile: true},
			&cli.StringSliceFlag{Name: "head", Usage: "fail unless the log still reaches the head `SEQ:MAC` unchanged (repeatable)"},
		},
		Action: runAuditVerify,
	}
}

func runAuditVerify(ctx context.Context, cmd *cli.Command) error {
	out := cmd.Root().Writer
	var heads []audit.Head
	for _, v := range cmd.StringSlice("head") {
		h, err := audit.ParseHead(v)
		if err != nil {
			return usageError(cmd, "--head: %v", err)
		}
		heads = append(heads, h)
	}
	anchored := ""
	if len(heads) > 0 {
		anchored = fmt.Sprintf(", reaches the %d head(s) given", len(heads))
	}
	if file := cmd.String("file"); file != "" {
		rs, err := readExport(cmd, file)
		if err != nil {
			return exitWith(exitFailure, err)
		}
		// The instance's keys, if there is one: an unkeyed export
		// verifies without.
		var keys *audit.Keys
		if _, cfg, err := openConfig(cmd); err == nil {
			keys = audit.NewKeys(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)
		}
		if err := audit.VerifyRecords(rs, keys, heads...); err != nil {
			if errors.Is(err, audit.ErrUnknownKey) && keys == nil {
				err = fmt.Errorf("%w; give --instance DIR for its auth.jwt_secret", err)
			}
			return exitWith(exitFailure, err)
		}
		fmt.Fprintf(out, "audit export %s: %d records, chain intact%s%s\n", file, len(rs), anchored, headOf(rs))
		return nil
	}
	return withAuditLog(ctx, cmd, func(inst config.Instance, db *gorm.DB) error {
		n, err := audit.Verify(ctx, db, heads...)
		if err != nil {
			return err
		}
		rs, err := audit.List(ctx, db, audit.Filter{After: n - 1})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "audit log of %s: %d records, chain intact%s%s\n", inst.Dir, n, anchored, headOf(rs))
		return nil
	})
}

// withAuditLog runs f on cmd's instance database with its audit keys and
// the audit table migrated, as withDatabase does.
func withAuditLog(ctx context.Context, cmd *cli.Command, f func(config.Instance, *gorm.DB) error) error {
	inst, err := openInstance(cmd, false)
	if err != nil {
		return err
	}
	return withDatabase(ctx, inst, false, func(db *gorm.DB) error {
		if err := audit.Migrate(db); err != nil {
			return err
		}
		return f(inst, db)
	})
}

// headOf names the newest record's head, to keep or to compare with a
// kept one.
func headOf(rs []audit.Record) string {
	if len(rs) == 0 {
		return ""
	}
	r := rs[len(rs)-1]
	return fmt.Sprintf("; head %v", audit.Head{Seq: r.Seq, MAC: r.Hash})
}

func auditHeadCommand() *cli.Command {
	return &cli.Command{
		Name:  "head",
		Usage: "print the audit log's head: the newest record's number and MAC",
		Description: "Prints SEQ:MAC of the newest record (nothing for an empty log). Keep it where the server\n" +
			"cannot write (another host, a ticket, paper): audit verify --head SEQ:MAC later fails if\n" +
			"records up to it were deleted or rewritten. The server also writes it to its log every\n" +
			"audit.head_interval and at shutdown (\"audit head: head=SEQ:MAC\").\n\n" +
			"Example: codumentorctl audit head | ssh logs 'cat >> codumentor-heads'",
		Flags:  []cli.Flag{instanceFlag()},
		Action: runAuditHead,
	}
}

func runAuditHead(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	return withAuditLog(ctx, cmd, func(_ config.Instance, db *gorm.DB) error {
		h, err := audit.LastHead(ctx, db)
		if err != nil {
			return err
		}
		if h.Seq > 0 {
			fmt.Fprintln(cmd.Root().Writer, h)
		}
		return nil
	})
}

// maxExportLine bounds one line of an export read back.
const maxExportLine = 16 << 20

func readExport(cmd *cli.Command, file string) ([]audit.Record, error) {
	var in io.Reader = cmd.Root().Reader
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxExportLine)
	var rs []audit.Record
	for line := 1; sc.Scan(); line++ {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s line %d: not an audit record: %w", file, line, err)
		}
		rs = append(rs, r)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s: a line is longer than %d bytes: not an audit export", file, maxExportLine)
		}
		return nil, err
	}
	return rs, nil
}

// recordAdmin puts an administrative action of codumentorctl in the
// instance's audit log, if the instance has a database yet.
func recordAdmin(ctx context.Context, inst config.Instance, data map[string]any) error {
	db, err := openDatabase(ctx, inst, false)
	if errors.Is(err, errNoDatabase) {
		return nil
	}
	if err != nil {
		return unwrapExit(err)
	}
	defer store.Close(db)
	if err := audit.Migrate(db); err != nil {
		return err
	}
	return audit.Write(ctx, db, audit.Entry{Kind: audit.KindAdmin, User: auth.CommandLine, Data: data})
}
