package ctl

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/urfave/cli/v3"
	"gorm.io/gorm"
)

// envInstance names the instance directory when --instance is not given,
// as it does for the server (codumentor api).
const envInstance = "CODUMENTOR_INSTANCE"

// defaultInstance is the server's default instance directory,
// ~/.codumentor; $CODUMENTOR_INSTANCE overrides it through the flag's
// Sources.
func defaultInstance() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".codumentor")
}

// instanceFlag is the --instance flag of every command that works on an
// instance directory, with the server's default.
func instanceFlag() cli.Flag {
	return &cli.StringFlag{
		Name:      "instance",
		Value:     defaultInstance(),
		Usage:     "`DIR`, the server's instance directory",
		Sources:   cli.EnvVars(envInstance),
		TakesFile: true,
	}
}

// openInstance returns the instance of cmd's --instance flag. With create
// it makes the directories the server would (0700); without, they must
// exist. Either way the instance must be private and belong to this user:
// a file codumentorctl created as another user (root, typically) is one
// the server could not open.
func openInstance(cmd *cli.Command, create bool) (config.Instance, error) {
	if cmd.String("instance") == "" {
		return config.Instance{}, usageError(cmd, "no instance directory: give --instance DIR or set $%s", envInstance)
	}
	inst, err := config.NewInstance(cmd.String("instance"))
	if err != nil {
		return inst, exitWith(exitFailure, err)
	}
	if err := checkOwner(inst.Dir); err != nil {
		return inst, exitWith(exitFailure, err)
	}
	if create {
		err = inst.Init()
	} else {
		err = inst.CheckModes()
	}
	if err != nil {
		return inst, exitWith(exitFailure, err)
	}
	return inst, nil
}

// openConfig opens cmd's existing instance and loads its config.yaml as
// the server does; an invalid configuration is a failure (exit 1).
func openConfig(cmd *cli.Command) (config.Instance, config.Config, error) {
	inst, err := openInstance(cmd, false)
	if err != nil {
		return inst, config.Config{}, err
	}
	cfg, err := inst.Load("")
	if err != nil {
		return inst, config.Config{}, exitWith(exitFailure, err)
	}
	return inst, cfg, nil
}

// checkOwner refuses an existing instance directory that belongs to
// another user.
func checkOwner(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to this user (uid %d): run codumentorctl as the server's user (for instance with sudo -u)", dir, sys.Uid, os.Geteuid())
	}
	return nil
}

// errNoDatabase is openDatabase's error for an instance whose SQLite
// file does not exist yet.
var errNoDatabase = errors.New("no database")

// openDatabase opens the instance's database, which must exist unless
// create is set: commands that only read should not leave an empty
// database behind a mistyped --instance.
//
// codumentorctl does not take the instance lock (config.Instance.Lock)
// that the server holds, but for migrate, so it works beside a running
// server: its writes
// (users, secrets rotate --reencrypt, repos add and sync, whose job the
// server runs) are short transactions under SQLite's own locking that
// never touch what the server keeps in memory (conversations, turns,
// approvals; on PostgreSQL, under the same advisory lock as the
// server's), it never runs crash recovery, gc skips layers a sandbox has
// locked, and backup reads a VACUUM INTO snapshot. restore writes only
// into an empty directory, never a served instance (its lock file is
// there).
func openDatabase(ctx context.Context, inst config.Instance, create bool) (*gorm.DB, error) {
	cfg, err := inst.Load("")
	if err != nil {
		return nil, exitWith(exitFailure, err)
	}
	dbc, err := cfg.Store.Database(inst)
	if err != nil {
		return nil, exitWith(exitFailure, err)
	}
	if !create && dbc.Backend == store.BackendSQLite {
		if _, err := os.Stat(dbc.Path); err != nil {
			return nil, exitWith(exitFailure, fmt.Errorf("%w in %s: %w (the server creates it at its first start, and so does codumentorctl users add)", errNoDatabase, inst.Dir, err))
		}
	}
	db, err := store.OpenConfig(ctx, dbc)
	if err != nil {
		return nil, exitWith(exitFailure, err)
	}
	if err := useAuditKeys(db, inst); err != nil {
		store.Close(db)
		return nil, exitWith(exitFailure, err)
	}
	return db, nil
}

// withDatabase runs f on inst's database, opened as openDatabase does,
// and closes it after. Errors of f are failures (exit 1).
func withDatabase(ctx context.Context, inst config.Instance, create bool, f func(*gorm.DB) error) error {
	db, err := openDatabase(ctx, inst, create)
	if err != nil {
		return err
	}
	defer store.Close(db)
	if err := f(db); err != nil {
		return exitWith(exitFailure, err)
	}
	return nil
}

// useAuditKeys gives db the audit log's MAC keys of inst's
// configuration, so that the records codumentorctl writes continue the
// server's chain and verify checks it.
func useAuditKeys(db *gorm.DB, inst config.Instance) error {
	cfg, err := inst.Load("")
	if err != nil {
		return fmt.Errorf("%w (codumentorctl needs auth.jwt_secret for the audit log's MACs)", err)
	}
	return audit.UseKeys(db, audit.NewKeys(cfg.Auth.JWTSecret, cfg.Auth.PreviousJWTSecrets))
}

// instanceChecks is the check source of `check --instance DIR`: the
// instance directory as the server will find it. Unlike the sandbox
// checks, each runs unless it needs what an earlier one failed to give.
func instanceChecks(ctx context.Context, o checkOptions, r *checkReport) {
	if o.instance == "" {
		return
	}
	if r.Report == nil {
		r.Report = &sandboxkit.Report{}
	}
	add := func(name string, err error, detail, remedy string) {
		c := sandboxkit.Check{Name: name, OK: err == nil, Detail: detail}
		if err != nil {
			c.Detail, c.Remedy = err.Error(), remedy
		}
		r.Checks = append(r.Checks, c)
	}
	inst := config.Instance{Dir: o.instance}

	create := "codumentorctl users add --instance " + inst.Dir + " NAME creates it"
	if _, err := os.Stat(inst.Dir); err != nil {
		add("instance-modes", err, "", create)
		// Nothing else to look at.
		return
	}
	err := checkOwner(inst.Dir)
	remedy := "run codumentorctl as the server's user"
	if err == nil {
		err = inst.CheckModes()
		switch {
		case errors.Is(err, fs.ErrNotExist):
			remedy = create
		case errors.Is(err, config.ErrLooseMode):
			remedy = "chmod -R go-rwx " + inst.Dir
		}
	}
	add("instance-modes", err, inst.Dir+" and its data, workspaces and logs directories are private (0700)", remedy)

	cfg, err := inst.Load("")
	add("config", err, inst.ConfigFile()+" loads and is valid", "fix the key named above in "+inst.ConfigFile())
	if err == nil {
		add("jwt-secret", jwtSecretStatus(cfg), describeSecret(cfg),
			"codumentorctl secrets rotate --instance "+inst.Dir)
		detail, err := promptStatus(cfg.LLM)
		add("system-prompt", err, detail, "fix the template in "+inst.ConfigFile()+" (llm.system_prompt or llm.system_prompt_file), or remove both for the built-in one")
		if cfg.Investigation.Enabled {
			// The server's binary is taken to be beside this one; a
			// server started with --config also hides that file.
			exe, _ := os.Executable()
			add("investigation-masks", nil, "hidden from host read-only investigations: "+strings.Join(config.HostMasks(inst, "", cfg, exe), ", "), "")
		}
	}

	db, err := openDatabase(ctx, inst, false)
	if cfg.Store.Backend == store.BackendPostgres {
		add("database", unwrapExit(err), "the PostgreSQL database store.postgres.dsn names opens", "check store.postgres.dsn and its password (password_env or password_file), and that the server can reach the database")
		if db != nil {
			store.Close(db)
		}
		return
	}
	add("database", unwrapExit(err), inst.Database()+" opens", "codumentorctl users add --instance "+inst.Dir+" NAME creates it with the first user (so does the server's first start)")
	if err != nil {
		return
	}
	defer store.Close(db)
	var mode string
	err = db.WithContext(ctx).Raw("PRAGMA journal_mode").Scan(&mode).Error
	if err == nil && mode != "wal" {
		err = fmt.Errorf("journal_mode=%s, not wal", mode)
	}
	add("wal", err, "journal_mode="+mode, "keep the instance on a local filesystem: SQLite's write-ahead log needs shared memory")
}

// promptStatus says which system prompt template the server uses and
// checks that it parses (config.Load has, but the file may have changed).
func promptStatus(l config.LLM) (string, error) {
	text, source, err := l.PromptText()
	if err != nil {
		return "", err
	}
	from := source
	switch source {
	case config.PromptBuiltin:
		from = "the built-in template (neither llm.system_prompt nor llm.system_prompt_file is set)"
	case config.PromptFile:
		from = source + " " + l.SystemPromptFile
	}
	if _, err := config.ParsePrompt(source, text, config.MaxPromptTemplate); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s, %d bytes, parses; GET /api/v1/admin/system-prompt shows it rendered", from, len(text)), nil
}

// jwtSecretStatus fails when the server would run without a secret.
func jwtSecretStatus(cfg config.Config) error {
	if cfg.Auth.JWTSecret == "" {
		return errors.New("auth.jwt_secret is not set: tokens die with the server, and users' secrets are stored in plaintext")
	}
	return nil
}

// describeSecret names the current secret by its key ID (never by its
// value) and says where it comes from.
func describeSecret(cfg config.Config) string {
	return fmt.Sprintf("key ID %s (from %s), %d previous", secrets.NewKeyring(cfg.Auth.JWTSecret, nil).KeyID(), secretSource(), len(cfg.Auth.PreviousJWTSecrets))
}

// secretSource says where config.Load takes auth.jwt_secret from.
func secretSource() string {
	if _, ok := os.LookupEnv(config.EnvJWTSecret); ok {
		return "$" + config.EnvJWTSecret
	}
	return "config.yaml"
}

// unwrapExit returns the message-bearing error inside an exitError.
func unwrapExit(err error) error {
	var ee *exitError
	if errors.As(err, &ee) && ee.err != nil {
		return ee.err
	}
	return err
}
