package ctl

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/audit"
)

// A PostgreSQL deployment's backup holds its database as a dump
// (data/database.jsonl): every table's rows, read in one REPEATABLE READ
// transaction, as JSON lines:
//
//	{"format":"codumentor-dump","version":1}
//	{"table":"users","columns":["id","name",…]}
//	["usr_…","alice",…]                      one line a row; bytea as base64
//	…
//	{"end":true,"counts":{"users":1,…},"audit_records":N,"audit_head":"SEQ:MAC"}
//
// Restore loads it into an empty database through the server's own
// schema (daemon.Migrate) and the copy of codumentorctl migrate
// (fillPostgres), and checks the counts and the audit log's head the
// trailer records. A dump, not pg_dump's archive: it restores into any
// version of PostgreSQL the server runs on (pg_dump refuses a server
// newer than itself), needs no client programs on the node, and keeps
// the password in this process.

const (
	dumpFormat = "codumentor-dump"
	// dumpFile is the dump's name in the archive and the restored
	// instance (removed once loaded).
	dumpFile = "database.jsonl"
)

type dumpHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
}

type dumpTable struct {
	Table   string   `json:"table"`
	Columns []string `json:"columns"`
}

type dumpTrailer struct {
	End          bool             `json:"end"`
	Counts       map[string]int64 `json:"counts"`
	AuditRecords int64            `json:"audit_records"`
	AuditHead    string           `json:"audit_head"`
}

// dumpPostgres writes db's tables to w in one REPEATABLE READ, read-only
// transaction: a consistent snapshot beside servers that go on writing
// (it does not take the advisory lock their transactions take).
func dumpPostgres(ctx context.Context, db *gorm.DB, w io.Writer) (dumpTrailer, error) {
	tr := dumpTrailer{End: true, Counts: map[string]int64{}}
	sqlDB, err := db.DB()
	if err != nil {
		return tr, err
	}
	tx, err := sqlDB.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return tr, fmt.Errorf("starting the snapshot: %w", err)
	}
	defer tx.Rollback()
	var tables []string
	rows, err := tx.QueryContext(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`)
	if err != nil {
		return tr, fmt.Errorf("listing the tables: %w", err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			rows.Close()
			return tr, err
		}
		tables = append(tables, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return tr, err
	}
	// In the order restore can insert them in.
	if tables, err = foreignKeyOrder(ctx, tx, tables); err != nil {
		return tr, err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	if err := enc.Encode(dumpHeader{Format: dumpFormat, Version: 1}); err != nil {
		return tr, err
	}
	for _, t := range tables {
		n, err := dumpTableRows(ctx, tx, enc, t)
		if err != nil {
			return tr, fmt.Errorf("dumping %s: %w", t, err)
		}
		tr.Counts[t] = n
	}
	var head audit.Head
	err = tx.QueryRowContext(ctx, `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`).Scan(&head.Seq, &head.MAC)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return tr, fmt.Errorf("reading the audit log's head: %w", err)
	}
	tr.AuditRecords, tr.AuditHead = tr.Counts["audit_log"], head.String()
	if err := enc.Encode(tr); err != nil {
		return tr, err
	}
	return tr, bw.Flush()
}

func dumpTableRows(ctx context.Context, tx *sql.Tx, enc *json.Encoder, table string) (int64, error) {
	rows, err := tx.QueryContext(ctx, "SELECT * FROM "+pgx.Identifier{table}.Sanitize())
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	if err := enc.Encode(dumpTable{Table: table, Columns: cols}); err != nil {
		return 0, err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		clear(vals)
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		if err := enc.Encode(vals); err != nil {
			return n, err
		}
		n++
	}
	return n, rows.Err()
}

// loadDump copies the dump r into the target, and returns its trailer.
func loadDump(ctx context.Context, t *pgTarget, r io.Reader) (dumpTrailer, error) {
	var tr dumpTrailer
	br := bufio.NewReaderSize(r, 1<<20)
	line, err := readLine(br)
	if err != nil {
		return tr, fmt.Errorf("the dump's header: %w", err)
	}
	var h dumpHeader
	if err := json.Unmarshal(line, &h); err != nil || h.Format != dumpFormat || h.Version != 1 {
		return tr, fmt.Errorf("not a database dump of this version (%.60s)", line)
	}
	line, err = readLine(br)
	for {
		if err != nil {
			return tr, fmt.Errorf("the dump ends without its trailer: %w", err)
		}
		var obj struct {
			dumpTable
			dumpTrailer
		}
		if err := json.Unmarshal(line, &obj); err != nil {
			return tr, fmt.Errorf("the dump: %.60s: %w", line, err)
		}
		if obj.End {
			return obj.dumpTrailer, nil
		}
		if obj.Table == "" {
			return tr, fmt.Errorf("the dump: a row where a table's header is due: %.60s", line)
		}
		tb, terr := t.table(obj.Table)
		if terr != nil {
			return tr, terr
		}
		bytea := make([]bool, len(obj.Columns))
		for i, c := range obj.Columns {
			bytea[i] = tb.types[c] == "bytea"
		}
		var next []byte
		_, err = t.copyRows(ctx, obj.Table, obj.Columns, func() ([]any, error) {
			l, err := readLine(br)
			if err != nil || !bytes.HasPrefix(l, []byte("[")) {
				next = l
				return nil, err
			}
			return dumpRow(l, bytea)
		})
		if err != nil {
			return tr, err
		}
		line = next
		if line == nil {
			err = io.ErrUnexpectedEOF
		}
	}
}

// dumpRow decodes one row: JSON numbers as int64 (or float64), base64
// strings as the bytes of bytea columns.
func dumpRow(line []byte, bytea []bool) ([]any, error) {
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	var vals []any
	if err := d.Decode(&vals); err != nil {
		return nil, err
	}
	if len(vals) != len(bytea) {
		return vals, nil // copyRows names the mismatch
	}
	for i, v := range vals {
		switch x := v.(type) {
		case json.Number:
			if n, err := strconv.ParseInt(string(x), 10, 64); err == nil {
				vals[i] = n
			} else if f, err := x.Float64(); err == nil {
				vals[i] = f
			} else {
				return nil, err
			}
		case string:
			if bytea[i] {
				b, err := base64.StdEncoding.DecodeString(x)
				if err != nil {
					return nil, fmt.Errorf("column %d: not base64: %w", i+1, err)
				}
				vals[i] = b
			}
		}
	}
	return vals, nil
}

// readLine reads one line without its newline.
func readLine(br *bufio.Reader) ([]byte, error) {
	l, err := br.ReadBytes('\n')
	if errors.Is(err, io.EOF) && len(l) > 0 {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(l, []byte("\n")), nil
}

// tableCounts returns the trailer's counts as verifyCopy takes them.
func (tr dumpTrailer) tableCounts() []tableCount {
	var out []tableCount
	for _, t := range slices.Sorted(maps.Keys(tr.Counts)) {
		out = append(out, tableCount{Table: t, Source: tr.Counts[t]})
	}
	return out
}

// head parses the trailer's audit head (none for an empty log).
func (tr dumpTrailer) head() (audit.Head, error) {
	if tr.AuditRecords == 0 {
		return audit.Head{}, nil
	}
	return audit.ParseHead(tr.AuditHead)
}
