package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/urfave/cli/v3"
)

// serverReloadWait is how long rotate --reencrypt waits between writing
// config.yaml and re-encrypting: a running server polls the file every
// 2 s, and until it reloads it cannot read rows under the new key.
const serverReloadWait = 3 * time.Second

func secretsCommand() *cli.Command {
	return &cli.Command{
		Name:  "secrets",
		Usage: "rotate auth.jwt_secret, show which key users' secrets are under",
		Description: "auth.jwt_secret signs login tokens and derives the key that encrypts users' secrets\n" +
			"and model profiles in the database. Previous secrets (auth.previous_jwt_secrets) still\n" +
			"verify tokens and decrypt rows, so a rotation logs nobody out and loses nothing.",
		Commands: []*cli.Command{secretsRotateCommand(), secretsStatusCommand()},
		Action:   groupAction,
	}
}

func secretsRotateCommand() *cli.Command {
	return &cli.Command{
		Name:  "rotate",
		Usage: "replace auth.jwt_secret with a new random one",
		Description: "Writes a new random auth.jwt_secret into DIR/config.yaml and moves the current one to\n" +
			"the front of auth.previous_jwt_secrets; the rest of the file, comments included, is\n" +
			"kept. The file is replaced atomically (mode 0600), and created if missing: a first\n" +
			"rotate is how a new instance gets its secret. Prints the new key ID, never the secret.\n\n" +
			"Safe while the server runs: it rereads config.yaml within 2 s. Tokens signed with a\n" +
			"previous secret stay valid, and rows under a previous key stay readable and are\n" +
			"re-encrypted under the new key when next read. With --reencrypt, every row is\n" +
			"re-encrypted now (after waiting 3 s for a running server to pick up the new key).\n" +
			"Once 'secrets status' shows no rows under a previous key and auth.token_ttl has passed,\n" +
			"that secret can be deleted from auth.previous_jwt_secrets. Backups taken under it (not\n" +
			"under a passphrase) then restore only with that secret: keep it with those backups\n" +
			"(restore names the key ID a backup needs).\n\n" +
			"Refuses when $" + config.EnvJWTSecret + " is set: the secret then lives in the environment.",
		Flags: []cli.Flag{
			instanceFlag(),
			&cli.BoolFlag{Name: "reencrypt", Usage: "re-encrypt every stored secret and model profile under the new key now"},
		},
		Action: runSecretsRotate,
	}
}

func runSecretsRotate(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	if _, ok := os.LookupEnv(config.EnvJWTSecret); ok {
		return exitWith(exitFailure, fmt.Errorf("$%s is set: auth.jwt_secret comes from the environment, not from config.yaml, so rotating the file would change nothing; "+
			"rotate it where the variable is set (keeping the old value in auth.previous_jwt_secrets), or unset it here if the server does not use it", config.EnvJWTSecret))
	}
	inst, err := openInstance(cmd, true)
	if err != nil {
		return err
	}
	old, err := inst.Load("")
	if err != nil {
		return exitWith(exitFailure, err)
	}
	next := config.NewSecret()
	n, err := config.RotateSecret(inst.ConfigFile(), next)
	if err != nil {
		return exitWith(exitFailure, fmt.Errorf("rotating auth.jwt_secret: %w", err))
	}
	out := cmd.Root().Writer
	newID := secrets.NewKeyring(next, nil).KeyID()
	if old.Auth.JWTSecret == "" {
		fmt.Fprintf(out, "set auth.jwt_secret in %s: key ID %s\n", inst.ConfigFile(), newID)
	} else {
		fmt.Fprintf(out, "rotated auth.jwt_secret in %s: key ID %s, was %s\n", inst.ConfigFile(), newID, secrets.NewKeyring(old.Auth.JWTSecret, nil).KeyID())
	}
	fmt.Fprintf(out, "previous secrets kept in auth.previous_jwt_secrets: %d\n", n)
	if err := recordAdmin(ctx, inst, map[string]any{"action": "jwt_secret_rotate", "key_id": newID, "previous": n}); err != nil {
		return exitWith(exitFailure, err)
	}
	if !cmd.Bool("reencrypt") {
		if n > 0 {
			fmt.Fprintln(out, "rows under previous keys are re-encrypted as they are read; --reencrypt does them all now")
		}
		return nil
	}
	return reencrypt(ctx, cmd, inst)
}

// reencrypt moves every row of the instance's secrets table to the
// current key of its configuration, then shows and checks the result.
func reencrypt(ctx context.Context, cmd *cli.Command, inst config.Instance) error {
	cfg, err := inst.Load("")
	if err != nil {
		return exitWith(exitFailure, err)
	}
	kr := secrets.NewKeyring(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)
	st, closeDB, err := openSecrets(ctx, inst, kr)
	if err != nil {
		return err
	}
	defer closeDB()
	if st == nil {
		fmt.Fprintln(cmd.Root().Writer, "no database yet: nothing to re-encrypt")
		return nil
	}
	select {
	case <-time.After(serverReloadWait):
	case <-ctx.Done():
		return exitWith(exitFailure, ctx.Err())
	}
	stats, rerr := st.Reencrypt(ctx)
	counts, err := st.KeyIDs(ctx)
	if err == nil && rerr == nil && underOldKeys(kr, counts) > 0 {
		// A server that had not reloaded yet may have stored a row under
		// the old key meanwhile; one more pass moves it.
		var more secrets.Stats
		more, rerr = st.Reencrypt(ctx)
		stats.Reencrypted += more.Reencrypted
		counts, err = st.KeyIDs(ctx)
	}
	if err != nil {
		return exitWith(exitFailure, err)
	}
	out := cmd.Root().Writer
	fmt.Fprintf(out, "re-encrypted %d of %d rows under key ID %s\n\n", stats.Reencrypted, stats.Rows, kr.KeyID())
	printKeyRows(out, keyRows(kr, counts))
	switch left := underOldKeys(kr, counts); {
	case rerr != nil:
		return exitWith(exitFailure, fmt.Errorf("re-encryption incomplete (the new secret is in place; rows left behind are re-encrypted when read): %w", rerr))
	case left > 0:
		return exitWith(exitFailure, fmt.Errorf("%d rows are still under old keys (written by a server that had not yet reloaded config.yaml?); they are re-encrypted when read", left))
	}
	fmt.Fprintf(out, "\nno rows remain under old keys\n")
	return nil
}

// underOldKeys counts the rows that are not under kr's current key.
func underOldKeys(kr *secrets.Keyring, counts map[string]int) int {
	n := 0
	for id, c := range counts {
		if id != kr.KeyID() {
			n += c
		}
	}
	return n
}

func secretsStatusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the current key and how many rows are under each key",
		Description: "Prints the key ID of auth.jwt_secret (a public digest, never the secret), the number\n" +
			"of previous secrets, and how many stored secrets and model profiles are under each key:\n" +
			"the current one, a previous one, none (plaintext, stored while no secret was set) or\n" +
			"an unknown key, whose rows no configured secret can decrypt. Safe while the server runs.",
		Flags: []cli.Flag{
			instanceFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print the status as JSON"},
		},
		Action: runSecretsStatus,
	}
}

// secretsStatus is the output of `secrets status --json`.
type secretsStatus struct {
	// KeyID is the current secret's, or "plaintext" when none is set.
	KeyID string `json:"key_id"`
	// Source is where the current secret comes from: config.yaml or the
	// environment variable.
	Source         string   `json:"source"`
	Previous       int      `json:"previous"`
	PreviousKeyIDs []string `json:"previous_key_ids"`
	Rows           []keyRow `json:"rows"`
}

// keyRow counts the rows under one key ID.
type keyRow struct {
	KeyID string `json:"key_id"`
	Rows  int    `json:"rows"`
	// Key is "current", "previous", "plaintext" or "unknown".
	Key string `json:"key"`
}

func runSecretsStatus(ctx context.Context, cmd *cli.Command) error {
	if err := noArgs(cmd); err != nil {
		return err
	}
	inst, cfg, err := openConfig(cmd)
	if err != nil {
		return err
	}
	kr := secrets.NewKeyring(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets)
	s := secretsStatus{KeyID: kr.KeyID(), Source: secretSource(), Previous: len(cfg.Auth.PreviousJWTSecrets), Rows: []keyRow{}}
	s.PreviousKeyIDs = kr.KeyIDs()
	if !kr.Plaintext() {
		s.PreviousKeyIDs = s.PreviousKeyIDs[1:]
	}
	st, closeDB, err := openSecrets(ctx, inst, kr)
	if err != nil {
		return err
	}
	defer closeDB()
	if st != nil {
		counts, err := st.KeyIDs(ctx)
		if err != nil {
			return exitWith(exitFailure, err)
		}
		s.Rows = keyRows(kr, counts)
	}

	out := cmd.Root().Writer
	if cmd.Bool("json") {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	if kr.Plaintext() {
		fmt.Fprintf(out, "current secret: none (from %s): new secrets are stored in plaintext; fix: codumentorctl secrets rotate --instance %s\n", s.Source, inst.Dir)
	} else {
		fmt.Fprintf(out, "current secret: key ID %s (from %s)\n", s.KeyID, s.Source)
	}
	fmt.Fprintf(out, "previous secrets: %d", s.Previous)
	if len(s.PreviousKeyIDs) > 0 {
		fmt.Fprintf(out, " (key IDs %s)", strings.Join(s.PreviousKeyIDs, ", "))
	}
	fmt.Fprintln(out)
	if len(s.Rows) == 0 {
		fmt.Fprintln(out, "\nno stored secrets or model profiles")
		return nil
	}
	fmt.Fprintln(out)
	printKeyRows(out, s.Rows)
	return nil
}

// openSecrets opens the instance's secrets table with kr. The Store is
// nil when the instance has no database yet, and so no rows.
func openSecrets(ctx context.Context, inst config.Instance, kr *secrets.Keyring) (*secrets.Store, func(), error) {
	if _, err := os.Stat(inst.Database()); errors.Is(err, fs.ErrNotExist) {
		return nil, func() {}, nil
	}
	db, err := openDatabase(ctx, inst, false)
	if err != nil {
		return nil, nil, err
	}
	st, err := secrets.New(db, kr)
	if err != nil {
		store.Close(db)
		return nil, nil, exitWith(exitFailure, err)
	}
	return st, func() { store.Close(db) }, nil
}

// keyRows labels the row counts of Store.KeyIDs with what kr has for
// each key, the current key first.
func keyRows(kr *secrets.Keyring, counts map[string]int) []keyRow {
	ids := kr.KeyIDs()
	rows := []keyRow{}
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		r := keyRow{KeyID: id, Rows: counts[id], Key: "unknown"}
		switch {
		case id == secrets.PlaintextKeyID:
			r.Key = "plaintext"
		case id == kr.KeyID():
			r.Key = "current"
		case slices.Contains(ids, id):
			r.Key = "previous"
		}
		rows = append(rows, r)
	}
	// The current key first; the others stay sorted by ID.
	slices.SortStableFunc(rows, func(a, b keyRow) int {
		switch {
		case a.Key == b.Key || a.Key != "current" && b.Key != "current":
			return 0
		case a.Key == "current":
			return -1
		}
		return 1
	})
	return rows
}

// keyNotes explain the keys that need the operator's attention.
var keyNotes = map[string]string{
	"plaintext": "stored unencrypted; re-encrypted when read once a secret is set",
	"unknown":   "UNREADABLE: no configured secret gives this key; put the secret back into auth.previous_jwt_secrets",
}

func printKeyRows(out io.Writer, rows []keyRow) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY ID\tROWS\tKEY\tNOTE")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", r.KeyID, r.Rows, r.Key, keyNotes[r.Key])
	}
	tw.Flush()
}
