package setup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/repos/repostest"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/daemon/store/storetest"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

func TestMain(m *testing.M) {
	sandboxkit.Main()
	os.Exit(m.Run())
}

// fixture is a Service over a real database, repository mirror and
// sandbox, with one repository (run_setup) whose setup.sh is script.
type fixture struct {
	t      *testing.T
	db     *gorm.DB
	convs  *store.Conversations
	repo   repos.Repository
	commit string
	s      *Service
	dir    string
	log    *sandboxtest.Buffer

	launches atomic.Int32 // setup sandboxes started

	mu     sync.Mutex
	events []published // in order
	wake   chan struct{}
}

// newFixture's before, if given, runs on the database before anything
// else uses it (gorm's callbacks must be registered before queries run).
func newFixture(t *testing.T, script string, before ...func(*gorm.DB)) *fixture {
	t.Helper()
	sandboxtest.RequireUnprivileged(t)
	if err := sandboxkit.Doctor(context.Background(), sandboxkit.DoctorOptions{}).Err(); err != nil {
		sandboxtest.SkipOrFail(t, "sandbox: %v", err)
	}
	dir := t.TempDir()
	t.Cleanup(func() { overlay.RemoveAll(dir) })
	ctx, cancel := context.WithCancel(context.Background())
	db, err := store.OpenConfig(ctx, storetest.Config(t))
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the setups end, then the queue, then
	// the database closes.
	t.Cleanup(func() { store.Close(db) })
	t.Cleanup(cancel)
	for _, f := range before {
		f(db)
	}
	convs, err := store.NewConversations(db)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, db: db, convs: convs, dir: filepath.Join(dir, "setups"), log: &sandboxtest.Buffer{}, wake: make(chan struct{}, 1)}
	var rs *repos.Service
	rs, f.repo, f.commit = repostest.Synced(t, db, filepath.Join(dir, "repo"), map[string]string{"setup.sh": script}, repos.Add{Name: "demo", RunSetup: true})
	f.s, err = Open(ctx, Options{
		Dir: f.dir, DB: db, Conversations: convs, Repositories: rs, Publish: f.publish,
		Sandbox: sandboxkit.Settings{Launching: func(context.Context, sandboxkit.LaunchRecord) error { f.launches.Add(1); return nil }},
		Log:     hclog.New(&hclog.LoggerOptions{Output: f.log}),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.s.Close)
	return f
}

// published is an event a setup told its conversation of.
type published struct {
	conversation, typ string
	data              any
}

func (f *fixture) publish(conversation, typ string, data any) {
	f.mu.Lock()
	f.events = append(f.events, published{conversation, typ, data})
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// output is the setup_output the conversation was told of so far.
func (f *fixture) output() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	for _, ev := range f.events {
		if o, ok := ev.data.(agentcore.SetupOutput); ok {
			b.WriteString(o.Text)
		}
	}
	return b.String()
}

// waitOutput waits until the setup's output has text.
func (f *fixture) waitOutput(text string) {
	f.t.Helper()
	timeout := time.After(2 * time.Minute)
	for !strings.Contains(f.output(), text) {
		select {
		case <-f.wake:
		case <-timeout:
			f.t.Fatalf("no %q in the setup's output %q", text, f.output())
		}
	}
}

// start creates a conversation on the repository, its setup row in the
// same transaction, and starts its setup.
func (f *fixture) start() store.Conversation {
	f.t.Helper()
	c, err := f.convs.CreateWith(context.Background(), "user_1", store.New{Repository: f.repo.ID, BaseCommit: f.commit},
		func(tx *gorm.DB, c store.Conversation) error { return f.s.Record(tx, c.ID, f.repo) })
	if err != nil {
		f.t.Fatal(err)
	}
	f.s.Start(c.UserID, c.ID)
	return c
}

func (f *fixture) row(conversation string) setupRow {
	f.t.Helper()
	var row setupRow
	if err := f.db.Where("conversation = ?", conversation).Take(&row).Error; err != nil {
		f.t.Fatal(err)
	}
	return row
}

func layerNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// The layer a setup makes is the one its conversation's row names, so
// the GC keeps it while the conversation lives, and removes it (and the
// row) once it is deleted.
func TestGCKeepsTheLayerASetupMade(t *testing.T) {
	f := newFixture(t, "# codumentor-setup-outputs: out\nmkdir out && echo made > out/f\n")
	c := f.start()
	layers, err := f.s.Layers(context.Background(), c.UserID, c.ID)
	if err != nil || len(layers) != 1 {
		t.Fatalf("Layers: %v %v", layers, err)
	}
	if b, err := os.ReadFile(filepath.Join(layers[0], "out", "f")); err != nil || string(b) != "made\n" {
		t.Fatalf("the layer's output: %q %v", b, err)
	}
	if row := f.row(c.ID); row.Status != setupOK || f.s.layerDir(row.Key) != layers[0] {
		t.Fatalf("row %+v for layer %s", row, layers[0])
	}
	removed, err := f.s.GC(context.Background())
	if err != nil || len(removed) != 0 {
		t.Fatalf("GC of a used layer removed %v, %v", removed, err)
	}
	if _, err := os.Stat(layers[0]); err != nil {
		t.Fatalf("the used layer is gone: %v", err)
	}
	if err := f.convs.Delete(context.Background(), c.UserID, c.ID); err != nil {
		t.Fatal(err)
	}
	removed, err = f.s.GC(context.Background())
	if err != nil || len(removed) != 1 || removed[0] != filepath.Base(layers[0]) {
		t.Fatalf("GC of an unused layer removed %v, %v", removed, err)
	}
	if names := layerNames(t, f.dir); len(names) != 0 {
		t.Fatalf("left in the setups directory: %v", names)
	}
}

// Conversations whose setups have one key wait for one run of the
// script, however many start while it waits for a slot.
func TestSetupsOfOneKeyRunOnce(t *testing.T) {
	f := newFixture(t, "# codumentor-setup-outputs: out\nmkdir out && echo made > out/f\n")
	// Both slots are taken: the first setup waits for one.
	ctx := context.Background()
	var releases []func()
	for range maxSetupsRunning {
		_, release, err := f.s.slots.acquire(ctx, "user_2")
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, release)
	}
	a, b := f.start(), f.start()
	waiting := func() int {
		f.s.mu.Lock()
		defer f.s.mu.Unlock()
		n := 0
		for _, build := range f.s.builds {
			n += len(build.waiters)
		}
		return n
	}
	for deadline := time.Now().Add(time.Minute); waiting() != 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d conversations wait for a run; want 2", waiting())
		}
	}
	if n := len(f.s.builds); n != 1 {
		t.Fatalf("%d runs for one key", n)
	}
	for _, release := range releases {
		release()
	}
	la, err := f.s.Layers(ctx, a.UserID, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := f.s.Layers(ctx, b.UserID, b.ID)
	if err != nil || len(la) != 1 || !slices.Equal(la, lb) {
		t.Fatalf("layers %v and %v (%v); want one shared", la, lb, err)
	}
	if n := f.launches.Load(); n != 1 {
		t.Fatalf("the script ran %d times; want once", n)
	}
}

// A setup whose row cannot be made to name its layer's key (which keeps
// the layer from the GC) fails, saying so, and makes no layer.
func TestSetupFailsWhenItsLayerCannotBeProtected(t *testing.T) {
	// Armed once the fixture is open: its own start-up updates the table.
	var armed, failed atomic.Bool
	f := newFixture(t, "# codumentor-setup-outputs: out\nmkdir out && echo made > out/f\n", func(db *gorm.DB) {
		err := db.Callback().Update().Before("gorm:update").Register("test:fail-protect", func(tx *gorm.DB) {
			if armed.Load() && tx.Statement.Table == "conversation_setups" && failed.CompareAndSwap(false, true) {
				tx.AddError(errors.New("disk I/O error"))
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	armed.Store(true)
	c := f.start()
	layers, err := f.s.Layers(context.Background(), c.UserID, c.ID)
	if err == nil || !strings.Contains(err.Error(), "the setup could not be recorded") || len(layers) != 0 {
		t.Fatalf("Layers: %v %v; want the setup failed", layers, err)
	}
	if !failed.Load() {
		t.Fatal("the update was not made")
	}
	if row := f.row(c.ID); row.Status != setupFailed || row.Key != "" {
		t.Fatalf("row %+v; want failed", row)
	}
	if names := layerNames(t, f.dir); len(names) != 0 {
		t.Fatalf("a layer was made: %v", names)
	}
	if !strings.Contains(f.log.String(), "disk I/O error") {
		t.Fatalf("the log does not say why: %s", f.log.String())
	}
}

// Close stops a running setup and returns once it has ended: its
// sandbox has exited and its scratch directory is removed, nothing is
// told or written after, and its row stays running for the next start.
func TestCloseJoinsARunningSetup(t *testing.T) {
	f := newFixture(t, "echo started\nexec sleep 600\n")
	c := f.start()
	f.waitOutput("started\n")
	if names := layerNames(t, f.dir); len(names) != 1 || !strings.HasPrefix(names[0], ".tmp-") {
		t.Fatalf("setups directory while the setup runs: %v; want its scratch directory", names)
	}
	closed := make(chan struct{})
	go func() { f.s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Minute):
		t.Fatal("Close did not return")
	}
	// The scratch directory goes once the sandbox has exited.
	if names := layerNames(t, f.dir); len(names) != 0 {
		t.Fatalf("left in the setups directory at Close's return: %v", names)
	}
	f.mu.Lock()
	told := len(f.events)
	f.mu.Unlock()
	if row := f.row(c.ID); row.Status != setupRunning {
		t.Fatalf("row %+v; want still running", row)
	}
	// Nothing starts any more.
	if _, err := f.s.Layers(context.Background(), c.UserID, c.ID); !errors.Is(err, errStopped) {
		t.Fatalf("Layers after Close: %v", err)
	}
	f.s.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.events) != told {
		t.Fatalf("events after Close: %v", f.events[told:])
	}
	if slices.ContainsFunc(f.events, func(ev published) bool { return ev.typ == agentcore.EventSetupFailed }) {
		t.Fatalf("a stopped setup was told as failed: %v", f.events)
	}
	if s := f.log.String(); strings.Contains(s, "[ERROR]") {
		t.Fatalf("errors logged: %s", s)
	}
}

// A conversation's setup row is made in the transaction that creates
// it: when it cannot be, no conversation is left.
func TestRecordIsPartOfTheConversation(t *testing.T) {
	f := newFixture(t, "true\n")
	err := f.db.Callback().Create().Before("gorm:create").Register("test:fail-setup-row", func(tx *gorm.DB) {
		if tx.Statement.Table == "conversation_setups" {
			tx.AddError(errors.New("disk I/O error"))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.convs.CreateWith(context.Background(), "user_1", store.New{Repository: f.repo.ID, BaseCommit: f.commit},
		func(tx *gorm.DB, c store.Conversation) error { return f.s.Record(tx, c.ID, f.repo) })
	if err == nil || !strings.Contains(err.Error(), "disk I/O error") {
		t.Fatalf("CreateWith: %v", err)
	}
	if cs, err := f.convs.List(context.Background(), "user_1", 10); err != nil || len(cs) != 0 {
		t.Fatalf("conversations left: %v %v", cs, err)
	}
}
