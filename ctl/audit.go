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
			"and its configuration at each start in a hash chain: each record carries the SHA-256\n" +
			"of the one before. Both commands only read, and are safe while the server runs.",
		Commands: []*cli.Command{auditExportCommand(), auditVerifyCommand()},
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
	db, err := openDatabase(ctx, inst, false)
	if err != nil {
		return err
	}
	defer store.Close(db)
	w := bufio.NewWriter(cmd.Root().Writer)
	enc := json.NewEncoder(w)
	// Pages bound the memory a long log takes.
	f.Limit = 1000
	for {
		rs, err := audit.List(ctx, db, f)
		if err != nil {
			return exitWith(exitFailure, err)
		}
		for _, r := range rs {
			if err := enc.Encode(r); err != nil {
				return exitWith(exitFailure, err)
			}
		}
		if len(rs) < f.Limit {
			break
		}
		f.After = rs[len(rs)-1].Seq
	}
	return w.Flush()
}

func auditVerifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "check the audit log's hash chain",
		Description: "Reads every record in order and checks that none was edited, deleted or reordered;\n" +
			"names the first record where the chain breaks and exits 1. With --file, checks an\n" +
			"export (codumentorctl audit export) instead of the instance's database.",
		Flags: []cli.Flag{instanceFlag(),
			&cli.StringFlag{Name: "file", Usage: "verify the JSON lines export `FILE` (- for standard input)", TakesFile: true},
		},
		Action: runAuditVerify,
	}
}

func runAuditVerify(ctx context.Context, cmd *cli.Command) error {
	out := cmd.Root().Writer
	if file := cmd.String("file"); file != "" {
		rs, err := readExport(cmd, file)
		if err != nil {
			return exitWith(exitFailure, err)
		}
		if err := audit.VerifyRecords(rs); err != nil {
			return exitWith(exitFailure, err)
		}
		fmt.Fprintf(out, "audit export %s: %d records, chain intact%s\n", file, len(rs), head(rs))
		return nil
	}
	inst, err := openInstance(cmd, false)
	if err != nil {
		return err
	}
	db, err := openDatabase(ctx, inst, false)
	if err != nil {
		return err
	}
	defer store.Close(db)
	if err := audit.Migrate(db); err != nil {
		return exitWith(exitFailure, err)
	}
	n, err := audit.Verify(ctx, db)
	if err != nil {
		return exitWith(exitFailure, err)
	}
	rs, err := audit.List(ctx, db, audit.Filter{After: n - 1})
	if err != nil {
		return exitWith(exitFailure, err)
	}
	fmt.Fprintf(out, "audit log of %s: %d records, chain intact%s\n", inst.Dir, n, head(rs))
	return nil
}

// head names the newest record's hash, to compare with a kept export.
func head(rs []audit.Record) string {
	if len(rs) == 0 {
		return ""
	}
	r := rs[len(rs)-1]
	return fmt.Sprintf("; record %d has hash %s", r.Seq, r.Hash)
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
	if _, err := os.Stat(inst.Database()); err != nil {
		return nil
	}
	db, err := store.Open(ctx, inst.Database())
	if err != nil {
		return err
	}
	defer store.Close(db)
	if err := audit.Migrate(db); err != nil {
		return err
	}
	return audit.Write(ctx, db, audit.Entry{Kind: audit.KindAdmin, User: auth.CommandLine, Data: data})
}
