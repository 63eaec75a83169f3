package ctl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
)

func migrateCommand() *cli.Command {
	return &cli.Command{
		Name:  "migrate",
		Usage: "copy an SQLite instance's database into an empty PostgreSQL database",
		Description: "Copies every table of the instance's SQLite database (data/codumentor.db) into the empty\n" +
			"PostgreSQL database DSN, in one transaction: the server's schema is made there, the rows\n" +
			"copied, and the copy checked (every table's row count, and the audit log's chain, verified\n" +
			"with the instance's auth.jwt_secret to the same number of records and the same head) before\n" +
			"it commits; a failure leaves the target as empty as it was. The migration is recorded in\n" +
			"the copy's audit log. The server must be stopped: migrate takes the instance's lock.\n\n" +
			"DSN holds no password (give it with --password-env, or PostgreSQL's own $PGPASSWORD or\n" +
			"~/.pgpass). config.yaml is not changed: migrate prints the store settings to put there.\n" +
			"The code index (data/index-N.db), workspaces and repositories stay in the instance\n" +
			"directory, as does data/codumentor.db.\n\n" +
			"Example: codumentorctl migrate --instance /srv/codumentor --to 'postgres://codumentor@db:5432/codumentor' --password-env PGPASSWORD",
		Flags: []cli.Flag{instanceFlag(),
			&cli.StringFlag{Name: "to", Usage: "the PostgreSQL database `DSN` (postgres://user@host:5432/db?sslmode=verify-full, or host=… dbname=…), without a password", Required: true},
			&cli.StringFlag{Name: "password-env", Usage: "read the database's password from the environment variable `VAR`"},
		},
		Action: runMigrate,
	}
}

func runMigrate(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	inst, cfg, err := openConfig(cmd)
	if err != nil {
		return err
	}
	if cfg.Store.Backend == store.BackendPostgres {
		return exitWith(exitFailure, fmt.Errorf("the store of %s is PostgreSQL already (store.backend: postgres): migrate copies an SQLite instance", inst.Dir))
	}
	target, to, err := targetConfig(cmd)
	if err != nil {
		return err
	}
	target.BusyTimeout = cfg.Store.BusyTimeout.Std()
	// A quiescent source: no server writes while it is copied.
	lock, err := inst.Lock()
	if err != nil {
		if errors.Is(err, config.ErrLocked) {
			return exitWith(exitFailure, fmt.Errorf("migrate needs the server stopped: %w", err))
		}
		return exitWith(exitFailure, err)
	}
	defer lock.Close()
	src, err := openDatabase(ctx, inst, false)
	if err != nil {
		return err
	}
	defer store.Close(src)
	dst, err := store.OpenConfig(ctx, target)
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("the target database: %w; nothing was written", err))
	}
	defer store.Close(dst)
	keys := audit.NewKeys(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)
	if err := audit.UseKeys(dst, keys); err != nil {
		return exitWith(exitFailure, err)
	}
	// The conversations' workspaces are in this instance: their home is
	// its node, whichever node another request reaches first.
	node := cfg.Cluster.Node
	if node == "" {
		if node, err = inst.NodeID(); err != nil {
			return exitWith(exitFailure, err)
		}
	}
	m, err := migrateSQLite(ctx, src, dst, node)
	if err != nil {
		if errors.Is(err, errTargetNotEmpty) {
			return exitWith(exitFailure, fmt.Errorf("migrate: %w; nothing was written", err))
		}
		return exitWith(exitFailure, fmt.Errorf("migrate: %w; nothing was written to %s (the transaction was rolled back)", err, to))
	}
	w := cmd.Root().Writer
	m.print(w, inst, to, cmd.String("to"), cmd.String("password-env"))
	if cfg.Auth.JWTSecret == "" {
		fmt.Fprintf(w, "\nauth.jwt_secret is not set: a server on PostgreSQL refuses to start without one (the servers sharing the database must share it). codumentorctl secrets rotate --instance %s writes one.\n", inst.Dir)
	}
	return nil
}

// migration is what migrateSQLite copied and checked.
type migration struct {
	counts  []tableCount
	records int64
	head    audit.Head
	// skipped are the source's tables left behind: an older version's
	// code index, kept in the instance database.
	skipped []tableCount
	// recorded is the migration's own audit record.
	recorded int64
	// homed conversations were given node as their home.
	node  string
	homed int64
}

func rowsAffected(r sql.Result) int64 {
	n, _ := r.RowsAffected()
	return n
}

// migrateSQLite copies the SQLite database src into the empty
// PostgreSQL database dst (fillPostgres), under SQLite's write lock, so
// that what is copied is one state of src, and checks the copy.
func migrateSQLite(ctx context.Context, src, dst *gorm.DB, node string) (migration, error) {
	var m migration
	// The source at this version's schema, as a server's start would
	// leave it: its columns are then the target's.
	if err := daemon.Migrate(ctx, src); err != nil {
		return m, fmt.Errorf("bringing the instance's database to this version's schema: %w", err)
	}
	err := src.WithContext(ctx).Transaction(func(stx *gorm.DB) error {
		var err error
		if m.records, err = audit.Verify(ctx, stx); err != nil {
			return fmt.Errorf("the instance's audit log does not verify, so the copy could not be checked against it: %w", err)
		}
		if m.head, err = audit.LastHead(ctx, stx); err != nil {
			return err
		}
		tables, err := sqliteTables(ctx, stx)
		if err != nil {
			return err
		}
		return fillPostgres(ctx, dst, func(t *pgTarget) error {
			for _, name := range t.order {
				if !tables[name] {
					continue
				}
				delete(tables, name)
				n, err := copySQLiteTable(ctx, stx, t, name)
				if err != nil {
					return err
				}
				m.counts = append(m.counts, tableCount{Table: name, Source: n})
			}
			for name := range tables {
				if !strings.HasPrefix(name, "retrieval_") {
					_, err := t.table(name)
					return err
				}
				var n int64
				if err := stx.Raw("SELECT COUNT(*) FROM " + sqliteIdent(name)).Scan(&n).Error; err != nil {
					return err
				}
				m.skipped = append(m.skipped, tableCount{Table: name, Source: n})
			}
			// The source's own count, beside the rows read.
			for i, c := range m.counts {
				if err := stx.Raw("SELECT COUNT(*) FROM " + sqliteIdent(c.Table)).Scan(&m.counts[i].Source).Error; err != nil {
					return err
				}
			}
			res, err := t.sql.ExecContext(ctx, `UPDATE conversations SET home = $1 WHERE home = ''`, node)
			if err != nil {
				return fmt.Errorf("making %s the conversations' home: %w", node, err)
			}
			m.node, m.homed = node, rowsAffected(res)
			return nil
		}, func(t *pgTarget) error {
			if err := t.verifyCopy(ctx, m.counts, m.records, m.head); err != nil {
				return err
			}
			rows := int64(0)
			for _, c := range m.counts {
				rows += c.Source
			}
			r, err := audit.Append(t.tx, audit.Entry{Kind: audit.KindAdmin, User: auth.CommandLine, Data: map[string]any{
				"action": "migrate", "from": store.BackendSQLite, "tables": len(m.counts), "rows": rows,
				"audit_head": m.head.String(), "node": m.node,
			}})
			m.recorded = r.Seq
			return err
		})
	})
	return m, err
}

// sqliteTables are the ordinary tables of the SQLite database (not its
// own, nor full-text indexes' virtual and shadow tables).
func sqliteTables(ctx context.Context, tx *gorm.DB) (map[string]bool, error) {
	rows, err := tx.WithContext(ctx).Raw(`SELECT name, type FROM pragma_table_list WHERE schema = 'main'`).Rows()
	if err != nil {
		return nil, fmt.Errorf("listing the instance database's tables: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, err
		}
		if typ == "table" && !strings.HasPrefix(name, "sqlite_") {
			out[name] = true
		}
	}
	return out, rows.Err()
}

func sqliteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// copySQLiteTable copies table name of the SQLite transaction stx into
// the target, column by column by name.
func copySQLiteTable(ctx context.Context, stx *gorm.DB, t *pgTarget, name string) (int64, error) {
	sqlTx, ok := stx.Statement.ConnPool.(*sql.Tx)
	if !ok {
		return 0, fmt.Errorf("the source's transaction is a %T, not a *sql.Tx", stx.Statement.ConnPool)
	}
	rows, err := sqlTx.QueryContext(ctx, "SELECT * FROM "+sqliteIdent(name))
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", name, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	n, err := t.copyRows(ctx, name, cols, func() ([]any, error) {
		if !rows.Next() {
			return nil, rows.Err()
		}
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		return vals, nil
	})
	if err != nil {
		return n, err
	}
	return n, rows.Close()
}

// print writes the summary of a migration and the settings that make
// the instance's server use the copy.
func (m migration) print(w io.Writer, inst config.Instance, to, dsn, passwordEnv string) {
	rows := int64(0)
	for _, c := range m.counts {
		rows += c.Source
	}
	fmt.Fprintf(w, "migrated %s into PostgreSQL %s: %s, %d rows\n", inst.Database(), to, plural(len(m.counts), "table", "tables"), rows)
	for _, c := range m.counts {
		fmt.Fprintf(w, "  %-24s %8d rows, %d copied\n", c.Table, c.Source, c.Target)
	}
	fmt.Fprintf(w, "verified: every table's row count is the source's; audit log: %d records, chain intact, head %s in both\n", m.records, describeHead(m.head))
	fmt.Fprintf(w, "recorded: audit record %d (admin, action migrate) in the PostgreSQL database\n", m.recorded)
	fmt.Fprintf(w, "home: %s at home on node %s, this instance's (their workspaces are here)\n", plural(int(m.homed), "conversation", "conversations"), m.node)
	for _, s := range m.skipped {
		fmt.Fprintf(w, "not copied: %s (%d rows), the code index an older version kept in the instance database: sync the repositories again to rebuild it in data/\n", s.Table, s.Source)
	}
	fmt.Fprintf(w, "\nconfig.yaml is unchanged. To serve this instance from PostgreSQL, set in %s:\n\n", inst.ConfigFile())
	fmt.Fprintf(w, "store:\n  backend: postgres\n  postgres:\n    dsn: %s\n", strconv.Quote(dsn))
	if passwordEnv != "" {
		fmt.Fprintf(w, "    password_env: %s\n", passwordEnv)
	}
	fmt.Fprintf(w, "\nand start the server. %s is left as it was; the code index, workspaces and repositories stay in %s.\n", inst.Database(), inst.Dir)
}

func describeHead(h audit.Head) string {
	if h.Seq == 0 {
		return "(empty log)"
	}
	return h.String()
}
