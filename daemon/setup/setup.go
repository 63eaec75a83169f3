// Package setup runs the repositories' project setup scripts. A
// repository with run_setup has its setup.sh (or .codumentor/setup.sh)
// run in the setup sandbox over the snapshot of a new conversation's
// commit, in the background from the conversation's creation; the
// workspace tools wait for it. Of the script's upper layer
// only the outputs it declares on a comment line
//
//	# codumentor-setup-outputs: node_modules .venv
//
// are kept, under <workspaces>/setups/<repository>-<key>, and stacked,
// read-only and shared, between the snapshot and every later
// conversation's own upper layer with the same key, so the script runs
// once per key. The layer is shared across commits, so it must never
// hide the repository's files: an output is a path the commit does not
// have (checked on every commit that stacks it), and nothing else of the
// upper layer survives (no changed or deleted files, no whiteouts).
//
// The key hashes the repository, the script and the files it names on
// a comment line
//
//	# codumentor-setup-inputs: go.sum package-lock.json
//
// (paths relative to the repository root; several such lines add up), and
// the network setting. Conversations whose setups have one key wait for
// one run of the script, which stops when none waits any more (they were
// deleted). A failed setup disables the conversation's workspace tools
// with the reason; nothing ever runs outside a sandbox.
package setup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// KindGC is the job collecting unused setup layers (Service.GC).
const KindGC = "setup_gc"

// The comment lines naming a setup's inputs and outputs.
const (
	setupInputsLine  = "# codumentor-setup-inputs:"
	setupOutputsLine = "# codumentor-setup-outputs:"
)

// setupKeyFormat separates a layer's repository and digest; layers
// without it kept the whole upper layer.
const setupKeyFormat = "-v2-"

// layerKey is the key of repository's setup layer whose inputs hash to
// digest (setupKey): what its conversations' rows hold, and the name of
// its directory (layerDir), which GC keeps while a row holds the key.
func layerKey(repository, digest string) string { return repository + setupKeyFormat + digest }

// layerDir is where the layer of key lives.
func (s *Service) layerDir(key string) string { return filepath.Join(s.dir, key) }

// setupScripts are where a setup script is looked for, first match wins.
var setupScripts = []string{".codumentor/setup.sh", "setup.sh"}

// Bounds of what a repository's setup script makes the server read.
const (
	maxSetupScript    = 1 << 20
	maxSetupInputs    = 64
	maxSetupInputSize = 256 << 20
	maxSetupOutputs   = 64
	maxSetupDepth     = 256 // directories nested in an output
	maxSetupOutput    = 1 << 20
	setupTimeout      = 30 * time.Minute
	maxSetupsRunning  = 2
)

// Setup states of a conversation (setupRow.Status).
const (
	setupRunning = "running"
	setupOK      = "ok"
	setupFailed  = "failed"
	setupNone    = "none" // the repository has no setup script
)

// setupRow is a conversation's setup: which layer it stacks (Key) and
// how its setup ended.
type setupRow struct {
	Conversation string `gorm:"primaryKey"`
	Key          string `gorm:"not null;index"`
	Status       string `gorm:"not null"`
	Reason       string `gorm:"not null"`
	Updated      time.Time
}

func (setupRow) TableName() string { return "conversation_setups" }

// Options are what a Service needs; all are required but OnEgress,
// MaxLayer and Log.
type Options struct {
	// Dir holds the setup layers (<workspaces>/setups).
	Dir           string
	DB            *gorm.DB
	Conversations *store.Conversations
	Repositories  *repos.Service
	// Publish records an event of a conversation (agentcore.Engine.Publish).
	// Nil means SetPublish is called before the first Start.
	Publish func(conversation, typ string, data any)
	// Sandbox are the server's sandbox settings: Policy builds each
	// setup's sandbox from them, and their Launching records it in the
	// audit log (nothing starts unrecorded).
	Sandbox sandboxkit.Settings
	// MaxLayer bounds a setup layer (repositories.max_snapshot_bytes).
	MaxLayer int64
	// OnEgress hears of every attempt through a setup's egress proxy
	// (metrics), besides the conversation's egress event.
	OnEgress func(egress.Event)
	Log      hclog.Logger
}

// Service runs and caches the conversations' setup scripts.
type Service struct {
	ctx     context.Context // the server's: a setup outlives its request
	stop    context.CancelFunc
	dir     string
	db      *gorm.DB
	convs   *store.Conversations
	repos   *repos.Service
	publish func(conversation, typ string, data any)
	// sandbox are the server's sandbox settings (Policy); its
	// Launching records each setup sandbox in the audit log (nothing
	// starts unrecorded).
	sandbox sandboxkit.Settings
	// maxLayer bounds a setup layer (repositories.max_snapshot_bytes).
	maxLayer int64
	// onEgress hears of every attempt through a setup's egress proxy
	// (metrics), besides the conversation's egress event.
	onEgress func(egress.Event)
	log      hclog.Logger
	slots    *setupSlots

	mu     sync.Mutex
	runs   map[string]*setupRun   // by conversation, while running
	builds map[string]*setupBuild // by key, while some conversation waits
	closed bool                   // Close was called: nothing starts
	// wg counts the runs' and builds' goroutines, joined by Close.
	wg sync.WaitGroup
	// scratch counts the setups' scratch directories in use.
	scratch atomic.Int32
	// layerMu orders making a layer visible against collecting layers.
	layerMu sync.Mutex
}

// flight is one goroutine of the Service's, found by its key while it
// runs: err is final once done is closed.
type flight struct {
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

// setupRun is a conversation's setup while it runs; cancel ends it when
// the conversation is deleted.
type setupRun struct {
	flight
	layers []string
}

// setupBuild is a run of a setup script, for the conversations waiting
// for its key; it is cancelled when none waits any more.
type setupBuild struct {
	flight
	waiters map[string]bool         // conversations, under Service.mu
	started *agentcore.SetupStarted // its setup_started event, once it runs
}

// errSetupDisabled prefixes the reason the workspace tools give.
const errSetupDisabled = "execution tools are disabled in this conversation: "

// errSetupAbandoned ends the setup of a deleted conversation.
var errSetupAbandoned = errors.New("the conversation was deleted during its project setup")

// errStopped ends the setups the server's stop interrupts: they run
// again after its restart (their rows stay running).
var errStopped = errors.New(errSetupDisabled + "the server stopped during the project setup")

// Migrate creates (or brings up to date) table conversation_setups in
// db.
func Migrate(db *gorm.DB) error {
	if err := db.AutoMigrate(&setupRow{}); err != nil {
		return fmt.Errorf("migrating table conversation_setups: %w", err)
	}
	// A layer of the whole upper layer may hide files of the commits
	// sharing it: its conversations' setups run again.
	if err := db.Model(&setupRow{}).Where("status = ? AND key NOT LIKE ?", setupOK, "%"+setupKeyFormat+"%").
		Update("status", setupRunning).Error; err != nil {
		return fmt.Errorf("migrating table conversation_setups: %w", err)
	}
	return nil
}

// Open opens the setups of conversations: its setups end with ctx, or
// Close.
func Open(ctx context.Context, o Options) (*Service, error) {
	if err := os.Mkdir(o.Dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	db := o.DB
	if err := Migrate(db); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	s := &Service{
		dir: o.Dir, db: db, convs: o.Conversations, repos: o.Repositories, publish: o.Publish,
		sandbox: o.Sandbox, maxLayer: o.MaxLayer, onEgress: o.OnEgress, log: o.Log,
		runs: map[string]*setupRun{}, builds: map[string]*setupBuild{},
		slots: newSetupSlots(maxSetupsRunning),
	}
	s.ctx, s.stop = context.WithCancel(ctx)
	return s, nil
}

// SetPublish sets where the setups' events go, for a caller that builds
// its publisher (the engine) after the Service it needs. Call it before
// the first Start.
func (s *Service) SetPublish(publish func(conversation, typ string, data any)) {
	s.publish = publish
}

// Close stops the running setups (they run again after a restart) and
// waits for them: once it returns, no setup writes to the database or
// publishes an event. Nothing starts afterwards.
func (s *Service) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.stop()
	s.wg.Wait()
}

// Record records, in tx (the transaction creating conversation on r),
// that its setup is to run if r has run_setup: the conversation is not
// kept without its setup row, whose tools would run without the setup.
// Start begins the setup once tx is committed.
func (s *Service) Record(tx *gorm.DB, conversation string, r repos.Repository) error {
	if !r.RunSetup {
		return nil
	}
	row := setupRow{Conversation: conversation, Status: setupRunning, Updated: time.Now().UTC()}
	if err := tx.Create(&row).Error; err != nil {
		return fmt.Errorf("recording a setup: %w", err)
	}
	return nil
}

// Start begins the setup Record recorded for user's conversation; it
// returns at once. A setup that does not start now (the server stops)
// starts when a workspace tool waits for it (Layers).
func (s *Service) Start(user, conversation string) {
	s.begin(user, conversation)
}

// Cancel ends the setup of a deleted conversation: its script's sandbox
// is killed unless another conversation waits for the same key.
func (s *Service) Cancel(conversation string) {
	s.mu.Lock()
	run := s.runs[conversation]
	s.mu.Unlock()
	if run != nil {
		run.cancel()
	}
}

// begin starts conversation's setup run unless one runs, and returns it.
func (s *Service) begin(user, conversation string) *setupRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	if run := s.runs[conversation]; run != nil {
		return run
	}
	run := &setupRun{}
	if s.fly(&run.flight, func(ctx context.Context) (err error) {
		run.layers, err = s.run(ctx, user, conversation)
		return err
	}, func() { delete(s.runs, conversation) }) {
		s.runs[conversation] = run
	}
	return run
}

// fly starts work in a goroutine of f that Close cancels and joins;
// s.mu is held. Once work returns, forget runs under s.mu and f.done is
// closed. A closed Service starts nothing: f ends at once with
// errStopped, and fly reports false.
func (s *Service) fly(f *flight, work func(context.Context) error, forget func()) bool {
	ctx, cancel := context.WithCancel(s.ctx)
	f.done, f.cancel = make(chan struct{}), cancel
	if s.closed {
		cancel()
		f.err = errStopped
		close(f.done)
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		f.err = work(ctx)
		s.mu.Lock()
		forget()
		s.mu.Unlock()
		close(f.done)
	}()
	return true
}

// Layers are the conversation's setup layer (none without a setup),
// waiting for a running setup; a failed setup's error says why the
// workspace tools are disabled.
func (s *Service) Layers(ctx context.Context, user, conversation string) ([]string, error) {
	s.mu.Lock()
	run := s.runs[conversation]
	s.mu.Unlock()
	if run == nil {
		var row setupRow
		err := s.db.WithContext(ctx).Where("conversation = ?", conversation).Take(&row).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			return nil, nil
		case err != nil:
			return nil, err
		case row.Status == setupNone:
			return nil, nil
		case row.Status == setupFailed:
			return nil, errors.New(errSetupDisabled + row.Reason)
		case row.Status == setupOK:
			return []string{s.layerDir(row.Key)}, nil
		}
		// Running, but not here: the server stopped during it. Again.
		run = s.begin(user, conversation)
	}
	select {
	case <-run.done:
		return run.layers, run.err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the project setup: %w", ctx.Err())
	}
}

// run runs (or reuses) conversation's setup and records its end; ctx
// ends when the conversation is deleted.
func (s *Service) run(ctx context.Context, user, conversation string) ([]string, error) {
	key, err := s.setup(ctx, user, conversation)
	if err != nil && s.ctx.Err() != nil {
		// The server is stopping: the setup runs again after its restart
		// (its row stays running).
		return nil, errStopped
	}
	if err != nil && ctx.Err() != nil {
		// Deleted: nobody to tell, and the collection removes its row.
		return nil, errors.New(errSetupDisabled + errSetupAbandoned.Error())
	}
	status, reason := setupOK, ""
	switch {
	case err != nil:
		status, reason = setupFailed, err.Error()
		s.publish(conversation, agentcore.EventSetupFailed, agentcore.SetupFailed{Error: reason})
	case key == "":
		status = setupNone
	}
	dbctx := context.WithoutCancel(s.ctx)
	if derr := s.db.WithContext(dbctx).Model(&setupRow{}).Where("conversation = ?", conversation).
		Updates(map[string]any{"key": key, "status": status, "reason": reason, "updated": time.Now().UTC()}).Error; derr != nil {
		s.log.Error("recording a setup's end failed", "conversation", conversation, "err", derr)
	}
	switch status {
	case setupFailed:
		return nil, errors.New(errSetupDisabled + reason)
	case setupNone:
		return nil, nil
	}
	return []string{s.layerDir(key)}, nil
}

// setup returns the layer name of conversation's setup, waiting for a
// run of the script when no layer of its key exists; "" means no script.
// Its error's text is shown to the user and the model: no host paths.
func (s *Service) setup(ctx context.Context, user, conversation string) (string, error) {
	// The snapshot's checkout and the script's sandbox are recorded for
	// this conversation in the audit log.
	actx := audit.ForConversation(ctx, user, conversation)
	c, err := s.convs.Get(actx, user, conversation)
	if err != nil {
		return "", errors.New("the conversation could not be read; the server log has the details")
	}
	r, err := s.repos.Get(actx, c.Repository)
	if err != nil {
		return "", errors.New("the conversation's repository was deleted")
	}
	snap, err := s.repos.Snapshot(actx, r.ID, c.BaseCommit)
	if err != nil {
		return "", err // ErrSnapshot's text, with its reason
	}
	spec, err := setupKey(snap, r.ID, r.SetupNetwork, r.SetupEgress)
	if err != nil {
		return "", err
	}
	if spec.script == "" {
		s.publish(conversation, agentcore.EventSetupFinished, agentcore.SetupFinished{})
		return "", nil
	}
	key := layerKey(r.ID, spec.digest)
	// The row holds the key before the layer is looked for or made: GC
	// keeps only the layers of keys in rows.
	if err := s.protect(ctx, conversation, key); err != nil {
		s.log.Error("recording a setup's layer failed", "conversation", conversation, "key", key, "err", err)
		return "", errors.New("the setup could not be recorded; the server log has the details")
	}
	b := s.join(key, conversation, func(bctx context.Context, b *setupBuild) error {
		// Recorded in the audit log for the conversation that started it.
		return s.build(audit.ForConversation(bctx, user, conversation), b, user, r, snap, key, spec)
	})
	if b == nil {
		s.publish(conversation, agentcore.EventSetupFinished, agentcore.SetupFinished{Cached: true, Script: spec.script})
		return key, nil
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		s.leave(key, b, conversation)
		return "", errSetupAbandoned
	}
	s.leave(key, b, conversation)
	if b.err != nil {
		return "", b.err
	}
	s.publish(conversation, agentcore.EventSetupFinished, agentcore.SetupFinished{Script: spec.script})
	return key, nil
}

// protect records key as conversation's layer, so that GC keeps it.
func (s *Service) protect(ctx context.Context, conversation, key string) error {
	res := s.db.WithContext(ctx).Model(&setupRow{}).Where("conversation = ?", conversation).Update("key", key)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("no setup row of conversation %s", conversation)
	}
	return nil
}

// join makes conversation wait for the run of key's script, starting it
// with build unless one runs; nil means key's layer exists.
func (s *Service) join(key, conversation string, build func(context.Context, *setupBuild) error) *setupBuild {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.builds[key]; b != nil {
		b.waiters[conversation] = true
		if b.started != nil {
			s.publish(conversation, agentcore.EventSetupStarted, *b.started)
		}
		return b
	}
	// A run ends by making the layer, then leaving s.builds: looked for
	// under s.mu, the layer is there unless no run made it yet.
	if st, err := os.Lstat(s.layerDir(key)); err == nil && st.IsDir() {
		return nil
	}
	b := &setupBuild{waiters: map[string]bool{conversation: true}}
	if s.fly(&b.flight, func(ctx context.Context) error { return build(ctx, b) }, func() {
		if s.builds[key] == b {
			delete(s.builds, key)
		}
	}) {
		s.builds[key] = b
	}
	return b
}

// leave ends conversation's wait for b; a run none waits for is
// cancelled, and a later conversation of its key starts another.
func (s *Service) leave(key string, b *setupBuild, conversation string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(b.waiters, conversation)
	if len(b.waiters) == 0 {
		b.cancel()
		if s.builds[key] == b {
			delete(s.builds, key)
		}
	}
}

// publishAll publishes an event of b to the conversations waiting for it.
func (s *Service) publishAll(b *setupBuild, typ string, data any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := data.(agentcore.SetupStarted); ok {
		b.started = &d
	}
	for c := range b.waiters {
		s.publish(c, typ, data)
	}
}

// build runs key's script on snap in a setup slot of user's, again when
// the slot was given to another user's setup, and keeps its outputs as
// key's layer.
func (s *Service) build(ctx context.Context, b *setupBuild, user string, r repos.Repository, snap, key string, spec setupSpec) error {
	for {
		attempt, release, err := s.slots.acquire(ctx, user)
		if err != nil {
			return errSetupAbandoned
		}
		err = s.runScript(attempt, b, r, snap, key, spec)
		preempted := errors.Is(context.Cause(attempt), errSetupPreempted) && ctx.Err() == nil
		release()
		if !preempted {
			return err
		}
		s.publishAll(b, agentcore.EventSetupOutput, agentcore.SetupOutput{Text: "(the setup gave its slot to another user's setup; it starts again when a slot is free)\n"})
	}
}

// runScript runs spec's script once on snap and keeps its outputs as
// key's layer.
func (s *Service) runScript(ctx context.Context, b *setupBuild, r repos.Repository, snap, key string, spec setupSpec) error {
	s.publishAll(b, agentcore.EventSetupStarted, agentcore.SetupStarted{Script: spec.script, Network: r.SetupNetwork, Egress: r.SetupEgress})
	s.scratch.Add(1)
	defer s.scratch.Add(-1)
	tmp, err := os.MkdirTemp(s.dir, ".tmp-")
	if err != nil {
		s.log.Error("making a setup layer failed", "err", err)
		return errors.New("the setup layer could not be made; the server log has the details")
	}
	defer overlay.RemoveAll(tmp)
	upper, work, layer := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "layer")
	for _, d := range []string{upper, work, layer} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return errors.New("the setup layer could not be made; the server log has the details")
		}
	}
	p, err := Policy(s.sandbox, s.maxLayer, &sandboxkit.Workspace{Lower: snap, Upper: upper, Work: work}, r.SetupNetwork, r.SetupEgress)
	if err == nil && p.Egress != nil {
		p.Egress.OnEvent = s.egressEvents(b)
	}
	if err == nil {
		out := &setupOutput{publish: func(text string) {
			s.publishAll(b, agentcore.EventSetupOutput, agentcore.SetupOutput{Text: text})
		}}
		cmd := sandboxkit.Command(ctx, p, "sh", "/workspace/"+spec.script)
		cmd.Dir = "/workspace"
		cmd.Stdout, cmd.Stderr = out, out
		cmd.OutputLimit = maxSetupOutput
		cmd.Timeout = setupTimeout
		err = cmd.Run()
		out.flush()
	}
	if err == nil {
		if err = keepOutputs(upper, layer, spec.outputs); err != nil && !errors.As(err, new(*outputError)) {
			s.log.Error("keeping a setup's outputs failed", "repository", r.ID, "key", key, "err", err)
			return errors.New("the setup's outputs could not be kept; the server log has the details")
		}
	}
	if err != nil && ctx.Err() != nil {
		return err // stopped: deleted, preempted or the server stops; the caller tells
	}
	if err != nil {
		s.log.Warn("a project setup failed", "repository", r.ID, "key", key, "err", sandboxkit.UnavailableDetail(err))
		msg := strings.NewReplacer(upper, "/workspace", work, "/workspace", snap, "/workspace", tmp, "(setup layer)").Replace(err.Error())
		if errors.Is(err, sandboxkit.ErrUnavailable) {
			return fmt.Errorf("the setup script was not run: %s; nothing was run", msg)
		}
		if le := (*sandboxkit.LimitError)(nil); errors.As(err, &le) && le.Limit == "disk" {
			return fmt.Errorf("the setup script %s was stopped: its layer took more than the cap of %d MiB (repositories.max_snapshot_bytes) and was removed", spec.script, p.Limits.Disk>>20)
		}
		var oe *outputError
		if errors.As(err, &oe) {
			return fmt.Errorf("the setup script %s: %s", spec.script, msg)
		}
		return fmt.Errorf("the setup script %s failed: %s (its output is in the setup_output events)", spec.script, msg)
	}
	s.layerMu.Lock()
	defer s.layerMu.Unlock()
	dst := s.layerDir(key)
	if _, err := os.Lstat(dst); err != nil {
		if err := os.Rename(layer, dst); err != nil {
			s.log.Error("keeping a setup layer failed", "err", err)
			return errors.New("the setup layer could not be kept; the server log has the details")
		}
	}
	return nil
}

// maxSetupEgressEvents bounds the egress events one setup records.
const maxSetupEgressEvents = 200

// egressEvents returns the OnEvent of a setup's egress proxy: each
// attempt is an egress event of the conversations waiting for b (the
// first maxSetupEgressEvents) and counted.
func (s *Service) egressEvents(b *setupBuild) func(egress.Event) {
	var n atomic.Int64
	return func(ev egress.Event) {
		if s.onEgress != nil {
			s.onEgress(ev)
		}
		if n.Add(1) > maxSetupEgressEvents {
			return
		}
		s.publishAll(b, agentcore.EventEgress, agentcore.NewEgress("", "setup", ev))
	}
}

// setupSpec is what a snapshot's setup script asks for.
type setupSpec struct {
	script  string // its path in the repository; "" means none
	digest  string // of the key
	outputs []string
}

// setupKey finds the setup script in the snapshot and hashes the
// repository, the script, the inputs it names and the network setting
// (host network, or an egress allow-list); script "" means none. It
// refuses outputs that would hide files of the snapshot.
func setupKey(snap, repository string, network bool, allow []string) (setupSpec, error) {
	root, err := os.OpenRoot(snap)
	if err != nil {
		return setupSpec{}, errors.New("the repository snapshot could not be read")
	}
	defer root.Close()
	var spec setupSpec
	for _, name := range setupScripts {
		if st, err := root.Lstat(name); err == nil && st.Mode().IsRegular() {
			spec.script = name
			break
		}
	}
	if spec.script == "" {
		return setupSpec{}, nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "codumentor-setup v2\x00repository=%s\x00network=%t\x00%s\x00", repository, network, spec.script)
	if len(allow) > 0 {
		fmt.Fprintf(h, "egress=%q\x00", allow)
	}
	body, err := readRooted(root, spec.script, maxSetupScript, h)
	if err != nil {
		return setupSpec{}, fmt.Errorf("the setup script %s: %w", spec.script, err)
	}
	inputs, err := setupInputs(string(body))
	if err == nil {
		spec.outputs, err = setupOutputs(string(body))
	}
	if err == nil {
		err = outputsAbsent(root, spec.outputs)
	}
	if err != nil {
		return setupSpec{}, fmt.Errorf("the setup script %s: %w", spec.script, err)
	}
	for _, in := range inputs {
		fmt.Fprintf(h, "\x00input\x00%s\x00", in)
		if _, err := readRooted(root, in, maxSetupInputSize, h); errors.Is(err, fs.ErrNotExist) {
			io.WriteString(h, "missing")
		} else if err != nil {
			return setupSpec{}, fmt.Errorf("the setup input %s: %w", in, err)
		}
	}
	spec.digest = hex.EncodeToString(h.Sum(nil))[:32]
	return spec, nil
}

// setupInputs parses the script's "# codumentor-setup-inputs:" lines.
func setupInputs(script string) ([]string, error) {
	return setupPaths(script, setupInputsLine, "input", maxSetupInputs)
}

// setupOutputs parses the script's "# codumentor-setup-outputs:" lines.
// An output is neither the whole tree nor in .git, and none is inside
// another.
func setupOutputs(script string) ([]string, error) {
	outs, err := setupPaths(script, setupOutputsLine, "output", maxSetupOutputs)
	if err != nil {
		return nil, err
	}
	for i, o := range outs {
		if o == "." || o == ".git" || strings.HasPrefix(o, ".git/") {
			return nil, fmt.Errorf("setup output %q must be a path inside the repository, outside .git", o)
		}
		for _, other := range outs[:i] {
			if o == other || strings.HasPrefix(o, other+"/") || strings.HasPrefix(other, o+"/") {
				return nil, fmt.Errorf("setup outputs %q and %q overlap", other, o)
			}
		}
	}
	return outs, nil
}

// setupPaths parses the script's lines starting with prefix: paths of
// kind, at most limit.
func setupPaths(script, prefix, kind string, limit int) ([]string, error) {
	var ps []string
	for line := range strings.Lines(script) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if !utf8.ValidString(f) || path.IsAbs(f) || path.Clean(f) != f || f == ".." || strings.HasPrefix(f, "../") {
				return nil, fmt.Errorf("setup %s %q must be a clean path relative to the repository root", kind, f)
			}
			ps = append(ps, f)
		}
	}
	if len(ps) > limit {
		return nil, fmt.Errorf("it names %d setup %ss; at most %d", len(ps), kind, limit)
	}
	return ps, nil
}

// outputError is a setup output that cannot be kept: the script's
// fault, told to the user.
type outputError struct{ msg string }

func (e *outputError) Error() string { return e.msg }

// outputsAbsent checks that the snapshot has none of the outputs, and
// only directories on their way: a layer stacked over the snapshot then
// adds files, and hides none.
func outputsAbsent(root *os.Root, outputs []string) error {
	for _, o := range outputs {
		parts := strings.Split(o, "/")
		for i := range parts {
			p := strings.Join(parts[:i+1], "/")
			st, err := root.Lstat(p)
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			if err != nil {
				return fmt.Errorf("setup output %s cannot be checked against the repository", o)
			}
			if i == len(parts)-1 {
				return fmt.Errorf("setup output %s is in the repository at this commit; outputs must be paths the repository does not have", o)
			}
			if !st.IsDir() {
				return fmt.Errorf("setup output %s: %s is not a directory in the repository", o, p)
			}
		}
	}
	return nil
}

// keepOutputs moves the outputs the script made from upper into layer
// (an empty directory); the rest of upper (the script's changes to the
// repository, its whiteouts) is left behind. Only directories, regular
// files and symlinks are kept, without overlayfs's xattrs (opaque
// directories, xwhiteouts), and no symlink is followed: the walk holds
// each directory by its descriptor. The sandbox has exited: nothing
// writes upper meanwhile.
func keepOutputs(upper, layer string, outputs []string) error {
	if err := overlay.RestoreAccess(upper); err != nil { // chmod 000 /workspace
		return err
	}
	up, err := openDirAt(unix.AT_FDCWD, upper)
	if err != nil {
		return err
	}
	defer unix.Close(up)
	ly, err := unix.Open(layer, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ly)
	for _, o := range outputs {
		if err := keepOutput(up, ly, o); err != nil {
			return fmt.Errorf("keeping setup output %s: %w", o, err)
		}
	}
	return nil
}

// keepOutput moves output o (if the script made it) from the directory
// up to ly, making the directories on its way.
func keepOutput(up, ly int, o string) error {
	parts := strings.Split(o, "/")
	var closers []int
	defer func() {
		for _, fd := range closers {
			unix.Close(fd)
		}
	}()
	for _, name := range parts[:len(parts)-1] {
		var st unix.Stat_t
		if err := unix.Fstatat(up, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil // not made (or not as a directory): nothing to keep
		}
		next, err := openDirAt(up, name)
		if err != nil {
			return err
		}
		closers = append(closers, next)
		up = next
		if err := unix.Mkdirat(ly, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			return err
		}
		if ly, err = openDirAt(ly, name); err != nil {
			return err
		}
		closers = append(closers, ly)
	}
	name := parts[len(parts)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(up, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFLNK:
		return unix.Renameat(up, name, ly, name)
	case unix.S_IFDIR:
		// Moving a directory rewrites its "..": it must be writable.
		if err := unix.Fchmodat(up, name, st.Mode&0o7777|0o700, 0); err != nil {
			return err
		}
		if err := unix.Renameat(up, name, ly, name); err != nil {
			return err
		}
		return cleanOutput(ly, name, o, 0)
	}
	return nil // a device, fifo, socket or whiteout
}

// openDirAt opens directory name of dir without following a symlink,
// and gives its owner (us) the access to move and remove its entries
// that the sandbox may have taken away.
func openDirAt(dir int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dir, name, flags, 0)
	if errors.Is(err, unix.EACCES) {
		var st unix.Stat_t
		if unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR &&
			unix.Fchmodat(dir, name, st.Mode&0o7777|0o700, 0) == nil {
			fd, err = unix.Openat(dir, name, flags, 0)
		}
	}
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil && st.Mode&0o700 != 0o700 {
		err = unix.Fchmod(fd, st.Mode&0o7777|0o700)
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// cleanOutput removes from directory name of dir (output o's rel) what a
// layer must not carry: overlayfs's xattrs, and entries that are not
// directories, regular files or symlinks.
func cleanOutput(dir int, name, rel string, depth int) error {
	if depth > maxSetupDepth {
		return &outputError{fmt.Sprintf("setup output %s nests directories deeper than %d", rel, maxSetupDepth)}
	}
	fd, err := openDirAt(dir, name)
	if err != nil {
		return fmt.Errorf("opening %s: %w", rel, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if err := dropOverlayXattrs(fd); err != nil {
		return fmt.Errorf("xattrs of %s: %w", rel, err)
	}
	for {
		names, err := f.Readdirnames(1024)
		for _, n := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFREG, unix.S_IFLNK:
			case unix.S_IFDIR:
				if err := cleanOutput(fd, n, rel+"/"+n, depth+1); err != nil {
					return err
				}
			default:
				if err := unix.Unlinkat(fd, n, 0); err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// dropOverlayXattrs removes the overlay xattrs (user.overlay.opaque and
// the others) from the directory fd.
func dropOverlayXattrs(fd int) error {
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size == 0 {
		return nil // no xattrs, or a file system without them
	}
	buf := make([]byte, size)
	if size, err = unix.Flistxattr(fd, buf); err != nil {
		return err
	}
	for attr := range strings.SplitSeq(string(buf[:size]), "\x00") {
		if strings.HasPrefix(attr, "user.overlay.") || strings.HasPrefix(attr, "trusted.overlay.") {
			if err := unix.Fremovexattr(fd, attr); err != nil {
				return err
			}
		}
	}
	return nil
}

// errSetupPreempted ends a setup's attempt whose slot another user's
// setup needs.
var errSetupPreempted = errors.New("the setup's slot went to another user's setup")

// setupSlots shares the setup slots between users: a free slot goes to
// the longest-waiting setup of the user holding fewest, and a user holds
// a second slot only while no other user waits. When one arrives, the
// user's latest setup is preempted: its attempt is cancelled, and once
// it has released its slot the slot is the newcomer's.
type setupSlots struct {
	mu      sync.Mutex
	n       int
	held    []*slotClaim // in the order granted
	waiting []*slotClaim // in the order of arrival
}

type slotClaim struct {
	user      string
	granted   chan struct{} // closed when the slot is the claim's
	preempt   func()
	preempted bool
}

func newSetupSlots(n int) *setupSlots { return &setupSlots{n: n} }

// acquire waits for a slot for a setup of user's; the slot is held until
// release. The attempt's context ends with ctx, or with cause
// errSetupPreempted when the slot is wanted for another user's setup.
func (s *setupSlots) acquire(ctx context.Context, user string) (attempt context.Context, release func(), err error) {
	attempt, cancel := context.WithCancelCause(ctx)
	c := &slotClaim{user: user, granted: make(chan struct{}), preempt: func() { cancel(errSetupPreempted) }}
	s.mu.Lock()
	s.waiting = append(s.waiting, c)
	s.schedule()
	s.mu.Unlock()
	release = sync.OnceFunc(func() {
		s.mu.Lock()
		s.held = slices.DeleteFunc(s.held, func(h *slotClaim) bool { return h == c })
		s.waiting = slices.DeleteFunc(s.waiting, func(w *slotClaim) bool { return w == c })
		s.schedule()
		s.mu.Unlock()
		cancel(nil)
	})
	select {
	case <-c.granted:
		return attempt, release, nil
	case <-ctx.Done():
		release()
		return nil, nil, ctx.Err()
	}
}

// holds counts the slots user holds, and those not preempted.
func (s *setupSlots) holds(user string) (all, kept int) {
	for _, h := range s.held {
		if h.user == user {
			all++
			if !h.preempted {
				kept++
			}
		}
	}
	return all, kept
}

// schedule grants free slots, and preempts a user's second slot for a
// waiting user who holds none.
func (s *setupSlots) schedule() {
	for len(s.waiting) > 0 {
		best, fewest := 0, -1
		for i, w := range s.waiting {
			if n, _ := s.holds(w.user); fewest < 0 || n < fewest {
				best, fewest = i, n
			}
		}
		if len(s.held) < s.n {
			c := s.waiting[best]
			s.waiting = slices.Delete(s.waiting, best, best+1)
			s.held = append(s.held, c)
			close(c.granted)
			continue
		}
		// Full: each waiting user who holds no slot is owed one, taken
		// from the latest setup of a user holding two.
		owed, pending := map[string]bool{}, 0
		for _, w := range s.waiting {
			if n, _ := s.holds(w.user); n == 0 {
				owed[w.user] = true
			}
		}
		for _, h := range s.held {
			if h.preempted {
				pending++
			}
		}
		for i := len(s.held) - 1; i >= 0 && pending < len(owed); i-- {
			h := s.held[i]
			if _, kept := s.holds(h.user); !h.preempted && kept > 1 {
				h.preempted = true
				h.preempt()
				pending++
			}
		}
		return
	}
}

// readRooted copies regular file name of root (at most limit bytes) to
// h; it returns the contents when limit is small enough to keep
// (maxSetupScript).
func readRooted(root *os.Root, name string, limit int64, h io.Writer) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fs.ErrNotExist
		}
		return nil, errors.New("it cannot be read (a symlink leaving the repository?)")
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, errors.New("it is not a regular file")
	} else if st.Size() > limit {
		return nil, fmt.Errorf("it is larger than %d bytes", limit)
	}
	var keep strings.Builder
	w := h
	if limit <= maxSetupScript {
		w = io.MultiWriter(h, &keep)
	}
	if _, err := io.Copy(w, io.LimitReader(f, limit)); err != nil {
		return nil, errors.New("it cannot be read")
	}
	return []byte(keep.String()), nil
}

// setupOutput turns a setup's output into setup_output events of whole
// lines, at most one every 100 ms unless 4 KiB are waiting.
type setupOutput struct {
	publish func(string)
	mu      sync.Mutex
	buf     []byte
	last    time.Time
}

func (o *setupOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(o.buf, p...)
	if i := strings.LastIndexByte(string(o.buf), '\n'); i >= 0 && (len(o.buf) >= 4096 || time.Since(o.last) >= 100*time.Millisecond) {
		o.emit(i + 1)
	} else if len(o.buf) >= 4096 {
		o.emit(len(o.buf))
	}
	return len(p), nil
}

func (o *setupOutput) emit(n int) {
	o.publish(strings.ToValidUTF8(string(o.buf[:n]), "\uFFFD"))
	o.buf = append(o.buf[:0], o.buf[n:]...)
	o.last = time.Now()
}

func (o *setupOutput) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.buf) > 0 {
		o.emit(len(o.buf))
	}
}

// GC removes the setup layers no conversation uses (and the records of
// deleted conversations), and scratch directories of setups a stopped
// server left.
func (s *Service) GC(ctx context.Context) ([]string, error) {
	s.layerMu.Lock()
	defer s.layerMu.Unlock()
	db := s.db.WithContext(ctx)
	if err := db.Where("conversation NOT IN (SELECT id FROM conversations)").Delete(&setupRow{}).Error; err != nil {
		return nil, err
	}
	var keys []string
	if err := db.Model(&setupRow{}).Distinct().Where("key != ''").Pluck("key", &keys).Error; err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, k := range keys {
		used[s.layerDir(k)] = true
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	running := s.scratch.Load() > 0
	removed := []string{}
	for _, e := range ents {
		p := filepath.Join(s.dir, e.Name())
		if used[p] || strings.HasPrefix(e.Name(), ".tmp-") && running {
			continue
		}
		if err := overlay.RemoveAll(p); err != nil {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
