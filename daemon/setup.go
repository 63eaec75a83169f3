package daemon

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
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/seccomp"
)

// Project setup scripts. A repository with run_setup has its setup.sh
// (or .codumentor/setup.sh) run in the setup sandbox over the snapshot of
// a new conversation's commit, in the background from the conversation's
// creation; the workspace tools wait for it. The script's upper layer is
// kept under <workspaces>/setups/<repository>-<key> and stacked, read-only
// and shared, between the snapshot and every later conversation's own
// upper layer with the same key, so the script runs once per key.
//
// The key hashes the script and the files it names on a comment line
//
//	# codumentor-setup-inputs: go.sum package-lock.json
//
// (paths relative to the repository root; several such lines add up), and
// the network setting. A failed setup disables the conversation's
// workspace tools with the reason; nothing ever runs outside a sandbox.

// kindSetupGC is the job collecting unused setup layers.
const kindSetupGC = "setup_gc"

// setupInputsLine starts the comment line naming a setup's inputs.
const setupInputsLine = "# codumentor-setup-inputs:"

// setupScripts are where a setup script is looked for, first match wins.
var setupScripts = []string{".codumentor/setup.sh", "setup.sh"}

// Bounds of what a repository's setup script makes the server read.
const (
	maxSetupScript    = 1 << 20
	maxSetupInputs    = 64
	maxSetupInputSize = 256 << 20
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

// setups runs and caches the conversations' setup scripts.
type setups struct {
	ctx     context.Context // the server's: a setup outlives its request
	dir     string
	db      *gorm.DB
	convs   *store.Conversations
	repos   *repos.Service
	publish func(conversation, typ string, data any)
	bwrap   string
	seccomp seccomp.Mode
	limits  *sandboxkit.Limits
	// launching records each setup sandbox in the audit log (nothing
	// starts unrecorded).
	launching func(context.Context, sandboxkit.LaunchRecord) error
	// onEgress hears of every attempt through a setup's egress proxy
	// (metrics), besides the conversation's egress event.
	onEgress func(egress.Event)
	// egressCaps are sandbox.egress's caps of each setup's proxy.
	egressCaps egress.Options
	log        hclog.Logger
	sem        chan struct{}

	mu   sync.Mutex
	runs map[string]*setupRun // by conversation, while running
	// layerMu orders making a layer visible against collecting layers.
	layerMu sync.Mutex
}

type setupRun struct {
	done   chan struct{}
	layers []string
	err    error
}

// errSetupDisabled prefixes the reason the workspace tools give.
const errSetupDisabled = "execution tools are disabled in this conversation: "

func openSetups(ctx context.Context, dir string, db *gorm.DB, s *setups) (*setups, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if err := db.AutoMigrate(&setupRow{}); err != nil {
		return nil, fmt.Errorf("migrating table conversation_setups: %w", err)
	}
	s.ctx, s.dir, s.db = ctx, dir, db
	s.runs = map[string]*setupRun{}
	s.sem = make(chan struct{}, maxSetupsRunning)
	return s, nil
}

// Start begins the setup of a new conversation on a repository with
// run_setup; it returns at once. Its error says the setup could not be
// recorded: without its row the conversation's tools would run without
// the setup, so the caller must not keep the conversation.
func (s *setups) Start(user, conversation string) error {
	c, err := s.convs.Get(s.ctx, user, conversation)
	if err != nil {
		return fmt.Errorf("reading the conversation for its setup: %w", err)
	}
	if c.Repository == "" {
		return nil
	}
	r, err := s.repos.Get(s.ctx, c.Repository)
	if err != nil {
		return fmt.Errorf("reading the repository for a setup: %w", err)
	}
	if !r.RunSetup {
		return nil
	}
	row := setupRow{Conversation: conversation, Status: setupRunning, Updated: time.Now().UTC()}
	if err := s.db.Create(&row).Error; err != nil {
		return fmt.Errorf("recording a setup: %w", err)
	}
	s.begin(user, conversation)
	return nil
}

// begin starts conversation's setup run unless one runs, and returns it.
func (s *setups) begin(user, conversation string) *setupRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	if run := s.runs[conversation]; run != nil {
		return run
	}
	run := &setupRun{done: make(chan struct{})}
	s.runs[conversation] = run
	go func() {
		run.layers, run.err = s.run(user, conversation)
		s.mu.Lock()
		delete(s.runs, conversation)
		s.mu.Unlock()
		close(run.done)
	}()
	return run
}

// Layers are the conversation's setup layer (none without a setup),
// waiting for a running setup; a failed setup's error says why the
// workspace tools are disabled.
func (s *setups) Layers(ctx context.Context, user, conversation string) ([]string, error) {
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
			return []string{filepath.Join(s.dir, row.Key)}, nil
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

// run runs (or reuses) conversation's setup and records its end.
func (s *setups) run(user, conversation string) ([]string, error) {
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	case <-s.ctx.Done():
		return nil, errors.New(errSetupDisabled + "the server stopped before the project setup ran")
	}
	key, err := s.setup(user, conversation)
	if err != nil && s.ctx.Err() != nil {
		// The server is stopping: the setup runs again after its restart
		// (its row stays running).
		return nil, errors.New(errSetupDisabled + "the server stopped during the project setup")
	}
	status, reason := setupOK, ""
	switch {
	case err != nil:
		status, reason = setupFailed, err.Error()
		s.publish(conversation, agentcore.EventSetupFailed, map[string]string{"error": reason})
	case key == "":
		status = setupNone
	}
	ctx := context.WithoutCancel(s.ctx)
	if derr := s.db.WithContext(ctx).Model(&setupRow{}).Where("conversation = ?", conversation).
		Updates(map[string]any{"key": key, "status": status, "reason": reason, "updated": time.Now().UTC()}).Error; derr != nil {
		s.log.Error("recording a setup's end failed", "conversation", conversation, "err", derr)
	}
	switch status {
	case setupFailed:
		return nil, errors.New(errSetupDisabled + reason)
	case setupNone:
		return nil, nil
	}
	return []string{filepath.Join(s.dir, key)}, nil
}

// setup returns the layer name of conversation's setup, running the
// script when no layer of its key exists; "" means no script. Its
// error's text is shown to the user and the model: no host paths.
func (s *setups) setup(user, conversation string) (string, error) {
	// The snapshot's checkout and the script's sandbox are recorded for
	// this conversation in the audit log.
	ctx := audit.ForConversation(s.ctx, user, conversation)
	c, err := s.convs.Get(ctx, user, conversation)
	if err != nil {
		return "", errors.New("the conversation could not be read; the server log has the details")
	}
	r, err := s.repos.Get(ctx, c.Repository)
	if err != nil {
		return "", errors.New("the conversation's repository was deleted")
	}
	snap, err := s.repos.Snapshot(ctx, r.ID, c.BaseCommit)
	if err != nil {
		return "", err // ErrSnapshot's text, with its reason
	}
	script, digest, err := setupKey(snap, r.SetupNetwork, r.SetupEgress)
	if err != nil {
		return "", err
	}
	if script == "" {
		s.publish(conversation, agentcore.EventSetupFinished, map[string]any{"cached": false, "script": ""})
		return "", nil
	}
	key := r.ID + "-" + digest
	dst := filepath.Join(s.dir, key)
	s.db.Model(&setupRow{}).Where("conversation = ?", conversation).Update("key", key)
	if st, err := os.Lstat(dst); err == nil && st.IsDir() {
		s.publish(conversation, agentcore.EventSetupFinished, map[string]any{"cached": true, "script": script})
		return key, nil
	}
	s.publish(conversation, agentcore.EventSetupStarted, map[string]any{"script": script, "network": r.SetupNetwork, "egress": r.SetupEgress})
	tmp, err := os.MkdirTemp(s.dir, ".tmp-")
	if err != nil {
		s.log.Error("making a setup layer failed", "err", err)
		return "", errors.New("the setup layer could not be made; the server log has the details")
	}
	defer overlay.RemoveAll(tmp)
	upper, work := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", errors.New("the setup layer could not be made; the server log has the details")
		}
	}
	var eg *egress.Options
	if len(r.SetupEgress) > 0 {
		o := s.egressCaps
		o.Allow, o.OnEvent = r.SetupEgress, s.egressEvents(conversation)
		eg = &o
	}
	p, err := sandboxkit.Profile(sandboxkit.ProfileSetup, sandboxkit.ProfileOptions{
		Bwrap: s.bwrap, Seccomp: s.seccomp, Limits: s.limits, ShareNet: r.SetupNetwork, Egress: eg, Launching: s.launching,
		Workspace: &sandboxkit.Workspace{Lower: snap, Upper: upper, Work: work},
	})
	if err == nil {
		out := &setupOutput{publish: func(text string) {
			s.publish(conversation, agentcore.EventSetupOutput, map[string]string{"text": text})
		}}
		cmd := sandboxkit.Command(ctx, p, "sh", "/workspace/"+script)
		cmd.Dir = "/workspace"
		cmd.Stdout, cmd.Stderr = out, out
		cmd.OutputLimit = maxSetupOutput
		cmd.Timeout = setupTimeout
		err = cmd.Run()
		out.flush()
	}
	if err != nil {
		s.log.Warn("a project setup failed", "conversation", conversation, "repository", r.ID, "err", sandboxkit.UnavailableDetail(err))
		msg := strings.NewReplacer(upper, "/workspace", work, "/workspace", snap, "/workspace", tmp, "(setup layer)").Replace(err.Error())
		if errors.Is(err, sandboxkit.ErrUnavailable) {
			return "", fmt.Errorf("the setup script was not run: %s; nothing was run", msg)
		}
		if le := (*sandboxkit.LimitError)(nil); errors.As(err, &le) && le.Limit == sandboxkit.LimitDisk {
			return "", fmt.Errorf("the setup script %s was stopped: its layer took more than the cap of %d MiB (repositories.max_snapshot_bytes) and was removed", script, s.limits.Disk>>20)
		}
		return "", fmt.Errorf("the setup script %s failed: %s (its output is in the setup_output events)", script, msg)
	}
	s.layerMu.Lock()
	defer s.layerMu.Unlock()
	if _, err := os.Lstat(dst); err != nil {
		if err := os.Rename(upper, dst); err != nil {
			s.log.Error("keeping a setup layer failed", "err", err)
			return "", errors.New("the setup layer could not be kept; the server log has the details")
		}
	}
	s.publish(conversation, agentcore.EventSetupFinished, map[string]any{"cached": false, "script": script})
	return key, nil
}

// maxSetupEgressEvents bounds the egress events one setup records.
const maxSetupEgressEvents = 200

// egressEvents returns the OnEvent of a setup's egress proxy: each
// attempt is an egress event of the conversation (the first
// maxSetupEgressEvents) and counted.
func (s *setups) egressEvents(conversation string) func(egress.Event) {
	var n atomic.Int64
	return func(ev egress.Event) {
		if s.onEgress != nil {
			s.onEgress(ev)
		}
		if n.Add(1) > maxSetupEgressEvents {
			return
		}
		s.publish(conversation, agentcore.EventEgress, map[string]any{
			"id": "", "name": "setup", "proto": ev.Proto, "host": ev.Host, "port": ev.Port, "addr": ev.Addr,
			"verdict": ev.Verdict, "reason": ev.Reason, "sent": ev.Sent, "received": ev.Received, "duration_ms": ev.Duration.Milliseconds(),
		})
	}
}

// setupKey finds the setup script in the snapshot and hashes it, the
// inputs it names and the network setting (host network, or an egress
// allow-list); script "" means none.
func setupKey(snap string, network bool, allow []string) (script, digest string, err error) {
	root, err := os.OpenRoot(snap)
	if err != nil {
		return "", "", errors.New("the repository snapshot could not be read")
	}
	defer root.Close()
	for _, name := range setupScripts {
		if st, err := root.Lstat(name); err == nil && st.Mode().IsRegular() {
			script = name
			break
		}
	}
	if script == "" {
		return "", "", nil
	}
	h := sha256.New()
	fmt.Fprintf(h, "codumentor-setup v1\x00network=%t\x00%s\x00", network, script)
	if len(allow) > 0 {
		fmt.Fprintf(h, "egress=%q\x00", allow)
	}
	body, err := readRooted(root, script, maxSetupScript, h)
	if err != nil {
		return "", "", fmt.Errorf("the setup script %s: %w", script, err)
	}
	inputs, err := setupInputs(string(body))
	if err != nil {
		return "", "", fmt.Errorf("the setup script %s: %w", script, err)
	}
	for _, in := range inputs {
		fmt.Fprintf(h, "\x00input\x00%s\x00", in)
		if _, err := readRooted(root, in, maxSetupInputSize, h); errors.Is(err, fs.ErrNotExist) {
			io.WriteString(h, "missing")
		} else if err != nil {
			return "", "", fmt.Errorf("the setup input %s: %w", in, err)
		}
	}
	return script, hex.EncodeToString(h.Sum(nil))[:32], nil
}

// setupInputs parses the script's "# codumentor-setup-inputs:" lines.
func setupInputs(script string) ([]string, error) {
	var ins []string
	for line := range strings.Lines(script) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), setupInputsLine)
		if !ok {
			continue
		}
		for _, f := range strings.Fields(rest) {
			if !utf8.ValidString(f) || path.IsAbs(f) || path.Clean(f) != f || f == ".." || strings.HasPrefix(f, "../") {
				return nil, fmt.Errorf("setup input %q must be a clean path relative to the repository root", f)
			}
			ins = append(ins, f)
		}
	}
	if len(ins) > maxSetupInputs {
		return nil, fmt.Errorf("it names %d setup inputs; at most %d", len(ins), maxSetupInputs)
	}
	return ins, nil
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

// gc removes the setup layers no conversation uses (and the records of
// deleted conversations), and scratch directories of setups a stopped
// server left.
func (s *setups) gc(ctx context.Context) ([]string, error) {
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
		used[k] = true
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	running := len(s.runs) > 0
	s.mu.Unlock()
	removed := []string{}
	for _, e := range ents {
		if used[e.Name()] || strings.HasPrefix(e.Name(), ".tmp-") && running {
			continue
		}
		if err := overlay.RemoveAll(filepath.Join(s.dir, e.Name())); err != nil {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}
