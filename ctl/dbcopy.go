package ctl

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/urfave/cli/v3"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/store"
)

// A pgTarget is an empty PostgreSQL database being filled, in one
// transaction, with the rows of another database: codumentorctl
// migrate's copy of an SQLite instance, restore's of a backup. The
// schema is the server's own (daemon.Migrate), made in the same
// transaction, so that a failure anywhere leaves the database as it was.
type pgTarget struct {
	tx     *gorm.DB
	sql    *sql.Tx
	tables map[string]*pgTable
	// order is the tables, each after those its foreign keys refer to.
	order []string
}

// pgTable is a table of the target: its columns' types, as
// information_schema names them, and its serial columns.
type pgTable struct {
	name    string
	types   map[string]string
	serials []string
}

// errTargetNotEmpty is wrapped by fillPostgres's error for a database
// that already has tables.
var errTargetNotEmpty = errors.New("the target database is not empty")

// fillPostgres runs fill on db's empty schema, in one transaction: the
// server's tables are made (daemon.Migrate), fill copies rows in, the
// serial columns' sequences are moved past the copied values, and done
// (when fill succeeded) checks and records what was copied. Any error
// rolls everything back. A schema that already has a table is refused,
// the tables named: a migration or a restore never mixes its rows with
// a deployment's.
func fillPostgres(ctx context.Context, db *gorm.DB, fill func(*pgTarget) error, done func(*pgTarget) error) error {
	return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := checkEmpty(tx); err != nil {
			return err
		}
		if err := daemon.Migrate(ctx, tx); err != nil {
			return fmt.Errorf("making the schema: %w", err)
		}
		sqlTx, ok := tx.Statement.ConnPool.(*sql.Tx)
		if !ok {
			return fmt.Errorf("the target's transaction is a %T, not a *sql.Tx", tx.Statement.ConnPool)
		}
		t := &pgTarget{tx: tx, sql: sqlTx}
		if err := t.load(ctx); err != nil {
			return err
		}
		if err := fill(t); err != nil {
			return err
		}
		if err := t.resetSequences(ctx); err != nil {
			return err
		}
		return done(t)
	})
}

// targetConfig is the PostgreSQL database of cmd's --to and
// --password-env, and its description for messages (user, host, port,
// database; never the password).
func targetConfig(cmd *cli.Command) (store.Config, string, error) {
	c := store.Config{Backend: store.BackendPostgres, DSN: cmd.String("to"), MaxConns: 2}
	cc, err := store.ParsePostgresDSN(c.DSN)
	if err != nil {
		return c, "", usageError(cmd, "--to: %s", strings.TrimPrefix(err.Error(), "store: "))
	}
	if v := cmd.String("password-env"); v != "" {
		if c.Password = os.Getenv(v); c.Password == "" {
			return c, "", usageError(cmd, "--password-env: the environment variable %s is not set", v)
		}
	}
	return c, fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database), nil
}

// checkEmpty refuses a PostgreSQL database whose schema has tables,
// naming them.
func checkEmpty(db *gorm.DB) error {
	var existing []string
	if err := db.Raw(`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY table_name`).Scan(&existing).Error; err != nil {
		return fmt.Errorf("listing the target's tables: %w", err)
	}
	if len(existing) > 0 {
		return fmt.Errorf("%w: its schema already has %s %s; give an empty database (or schema: ?search_path=…)", errTargetNotEmpty, plural(len(existing), "table", "tables"), strings.Join(existing, ", "))
	}
	return nil
}

// load reads the schema daemon.Migrate made: tables, column types,
// serial columns and the order of the foreign keys.
func (t *pgTarget) load(ctx context.Context) error {
	t.tables = map[string]*pgTable{}
	rows, err := t.sql.QueryContext(ctx, `SELECT table_name, column_name, data_type,
		COALESCE(pg_get_serial_sequence(quote_ident(table_name), column_name), '')
		FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position`)
	if err != nil {
		return fmt.Errorf("reading the target's columns: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, col, typ, seq string
		if err := rows.Scan(&table, &col, &typ, &seq); err != nil {
			return err
		}
		tb := t.tables[table]
		if tb == nil {
			tb = &pgTable{name: table, types: map[string]string{}}
			t.tables[table] = tb
		}
		tb.types[col] = typ
		if seq != "" {
			tb.serials = append(tb.serials, col)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	names := make([]string, 0, len(t.tables))
	for n := range t.tables {
		names = append(names, n)
	}
	t.order, err = foreignKeyOrder(ctx, t.sql, names)
	return err
}

// foreignKeyOrder returns tables (of the current schema of the
// PostgreSQL transaction tx) ordered so that each comes after those its
// foreign keys refer to: the order rows can be inserted in.
func foreignKeyOrder(ctx context.Context, tx *sql.Tx, tables []string) ([]string, error) {
	refs := map[string][]string{}
	fk, err := tx.QueryContext(ctx, `SELECT c.relname, f.relname FROM pg_constraint k
		JOIN pg_class c ON c.oid = k.conrelid JOIN pg_class f ON f.oid = k.confrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE k.contype = 'f' AND n.nspname = current_schema()`)
	if err != nil {
		return nil, fmt.Errorf("reading the foreign keys: %w", err)
	}
	defer fk.Close()
	for fk.Next() {
		var from, to string
		if err := fk.Scan(&from, &to); err != nil {
			return nil, err
		}
		if from != to {
			refs[from] = append(refs[from], to)
		}
	}
	if err := fk.Err(); err != nil {
		return nil, err
	}
	names := slices.Sorted(slices.Values(tables))
	var order []string
	placed := map[string]bool{}
	var place func(n string, depth int)
	place = func(n string, depth int) {
		if placed[n] || depth > len(names) || !slices.Contains(names, n) {
			return
		}
		for _, r := range refs[n] {
			place(r, depth+1)
		}
		placed[n] = true
		order = append(order, n)
	}
	for _, n := range names {
		place(n, 0)
	}
	return order, nil
}

// table returns the target's table name, or an error naming it as
// what the source has and the schema does not.
func (t *pgTarget) table(name string) (*pgTable, error) {
	tb := t.tables[name]
	if tb == nil {
		return nil, fmt.Errorf("table %s has no place in the schema of this version of Codumentor (from another version?): nothing can be copied into it", name)
	}
	return tb, nil
}

// maxParams bounds one INSERT's placeholders (PostgreSQL's limit is
// 65535); batchRows its rows.
const (
	maxParams = 60000
	batchRows = 500
)

// copyRows inserts into table the rows next returns (a row's values in
// the order of cols; next returns nil at the end), converted to the
// types of the target's columns, in batches. The rows the schema made
// itself (access_generation's one row) are replaced. It returns how many
// rows it inserted.
func (t *pgTarget) copyRows(ctx context.Context, table string, cols []string, next func() ([]any, error)) (int64, error) {
	tb, err := t.table(table)
	if err != nil {
		return 0, err
	}
	types := make([]string, len(cols))
	quoted := make([]string, len(cols))
	for i, c := range cols {
		typ, ok := tb.types[c]
		if !ok {
			return 0, fmt.Errorf("column %s.%s has no place in the schema of this version of Codumentor", table, c)
		}
		types[i], quoted[i] = typ, pgx.Identifier{c}.Sanitize()
	}
	name := pgx.Identifier{table}.Sanitize()
	if _, err := t.sql.ExecContext(ctx, "DELETE FROM "+name); err != nil {
		return 0, fmt.Errorf("emptying %s: %w", table, err)
	}
	per := max(1, min(batchRows, maxParams/max(len(cols), 1)))
	var batch []any
	var n, inBatch int64
	flush := func() error {
		if inBatch == 0 {
			return nil
		}
		var q strings.Builder
		q.WriteString("INSERT INTO " + name + " (" + strings.Join(quoted, ", ") + ") VALUES ")
		for r := range inBatch {
			if r > 0 {
				q.WriteString(", ")
			}
			q.WriteByte('(')
			for c := range cols {
				if c > 0 {
					q.WriteString(", ")
				}
				q.WriteString("$" + strconv.Itoa(int(r)*len(cols)+c+1))
			}
			q.WriteByte(')')
		}
		if _, err := t.sql.ExecContext(ctx, q.String(), batch...); err != nil {
			return fmt.Errorf("inserting rows %d to %d of %s: %w", n-inBatch+1, n, table, err)
		}
		batch, inBatch = batch[:0], 0
		return nil
	}
	for {
		row, err := next()
		if err != nil {
			return n, fmt.Errorf("reading row %d of %s: %w", n+1, table, err)
		}
		if row == nil {
			break
		}
		if len(row) != len(cols) {
			return n, fmt.Errorf("row %d of %s has %d values for %d columns", n+1, table, len(row), len(cols))
		}
		n++
		for i, v := range row {
			cv, err := toColumn(v, types[i])
			if err != nil {
				return n, fmt.Errorf("row %d of %s, column %s (%s): %w", n, table, cols[i], types[i], err)
			}
			batch = append(batch, cv)
		}
		if inBatch++; inBatch == int64(per) {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	return n, flush()
}

// resetSequences moves every serial column's sequence past the largest
// value copied, so that the server's next insert takes a new one.
func (t *pgTarget) resetSequences(ctx context.Context) error {
	for _, name := range t.order {
		tb := t.tables[name]
		for _, c := range tb.serials {
			col, table := pgx.Identifier{c}.Sanitize(), pgx.Identifier{name}.Sanitize()
			q := `SELECT setval(pg_get_serial_sequence($1, $2), GREATEST(COALESCE(MAX(` + col + `), 0), 1), MAX(` + col + `) IS NOT NULL) FROM ` + table
			if _, err := t.sql.ExecContext(ctx, q, table, c); err != nil {
				return fmt.Errorf("resetting the sequence of %s.%s: %w", name, c, err)
			}
		}
	}
	return nil
}

// count is table's number of rows in the target.
func (t *pgTarget) count(ctx context.Context, table string) (int64, error) {
	var n int64
	err := t.sql.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n)
	return n, err
}

// tableCount is one table's rows in the source and the copy.
type tableCount struct {
	Table  string `json:"table"`
	Source int64  `json:"rows"`
	Target int64  `json:"-"`
}

// verifyCopy checks that every table has the rows the source counted,
// and that the copy's audit log verifies (with the keys db has) to the
// source's number of records and head.
func (t *pgTarget) verifyCopy(ctx context.Context, counts []tableCount, records int64, head audit.Head) error {
	var differ []string
	for i := range counts {
		n, err := t.count(ctx, counts[i].Table)
		if err != nil {
			return fmt.Errorf("counting the rows of %s: %w", counts[i].Table, err)
		}
		counts[i].Target = n
		if n != counts[i].Source {
			differ = append(differ, fmt.Sprintf("%s: %d rows, not %d", counts[i].Table, n, counts[i].Source))
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("the copy's row counts differ from the source's: %s", strings.Join(differ, "; "))
	}
	n, err := audit.Verify(ctx, t.tx)
	if err != nil {
		return fmt.Errorf("the copy's audit log does not verify: %w", err)
	}
	h, err := audit.LastHead(ctx, t.tx)
	if err != nil {
		return err
	}
	if n != records || h != head {
		return fmt.Errorf("the copy's audit log verifies to %d records, head %s; the source's to %d, head %s", n, h, records, head)
	}
	return nil
}

// toColumn converts v, as a source database gives it (SQLite: text
// times, 0/1 booleans, blobs; a dump: JSON's strings and numbers), to
// what a PostgreSQL column of type typ takes.
func toColumn(v any, typ string) (any, error) {
	if v == nil {
		return nil, nil
	}
	if b, ok := v.([]byte); ok && typ != "bytea" {
		if !utf8.Valid(b) {
			return nil, errors.New("bytes that are not UTF-8 text")
		}
		v = string(b)
	}
	switch typ {
	case "boolean":
		switch x := v.(type) {
		case bool:
			return x, nil
		case int64:
			if x == 0 || x == 1 {
				return x == 1, nil
			}
		case float64:
			if x == 0 || x == 1 {
				return x == 1, nil
			}
		case string:
			if b, err := strconv.ParseBool(x); err == nil {
				return b, nil
			}
		}
	case "timestamp with time zone", "timestamp without time zone", "date":
		switch x := v.(type) {
		case time.Time:
			return x, nil
		case string:
			for _, layout := range timeLayouts {
				if tm, err := time.Parse(layout, x); err == nil {
					return tm, nil
				}
			}
		}
	case "bytea":
		switch x := v.(type) {
		case []byte:
			return x, nil
		case string:
			return []byte(x), nil
		}
	case "smallint", "integer", "bigint":
		switch x := v.(type) {
		case int64:
			return x, nil
		case float64:
			if x == float64(int64(x)) {
				return int64(x), nil
			}
		case bool:
			if x {
				return int64(1), nil
			}
			return int64(0), nil
		case string:
			if i, err := strconv.ParseInt(x, 10, 64); err == nil {
				return i, nil
			}
		}
	case "numeric", "double precision", "real":
		switch x := v.(type) {
		case int64, float64:
			return x, nil
		case string:
			if f, err := strconv.ParseFloat(x, 64); err == nil {
				return f, nil
			}
		}
	default: // text, character varying, json, …
		switch x := v.(type) {
		case string:
			if strings.IndexByte(x, 0) >= 0 {
				return nil, errors.New("text with a NUL byte, which PostgreSQL's text cannot hold")
			}
			return x, nil
		case int64:
			return strconv.FormatInt(x, 10), nil
		case float64:
			return strconv.FormatFloat(x, 'g', -1, 64), nil
		case bool:
			return strconv.FormatBool(x), nil
		case time.Time:
			return x.Format(time.RFC3339Nano), nil
		}
	}
	return nil, fmt.Errorf("a %T value (%.40v) does not convert", v, v)
}

// timeLayouts are the forms of a time as text: SQLite's driver's (the
// first four), RFC 3339, and a date.
var timeLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02T15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04:05.999999999",
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999 -0700 MST",
	"2006-01-02",
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
