// Package repos keeps the repositories that conversations start on:
// their rows in table repositories, their bare mirrors in
// <instance>/repos/<id>.git, the sync job that fetches (and, when
// retrieval is enabled, indexes) them, the read-only snapshots that
// conversations' workspaces show, and the push gateway.
//
// Host-side git only transports (package integrations/git); checkouts
// and the push commit are built in sandboxes. Credentials are instance
// secrets (the users' secrets' keyring, owner InstanceOwner), referenced
// by name, handed to git for one command.
package repos

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/sandboxkit/egress"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
	"github.com/codumentor/codumentor/sandboxkit/randid"
)

// InstanceOwner owns the instance secrets in the secrets table: no user
// ID ("usr_…") can be it.
const InstanceOwner = "instance"

// Job kinds.
const (
	KindSync       = "repository_sync"
	KindSnapshotGC = "snapshot_gc"
)

var (
	// ErrNotFound wraps agentcore.ErrNotFound: no such repository.
	ErrNotFound = fmt.Errorf("repos: %w", agentcore.ErrNotFound)
	// ErrInvalid is wrapped by errors about a request's values (a URL or
	// branch refused before git runs, a bad name or ref).
	ErrInvalid = errors.New("repos: invalid request")
	// ErrExists is wrapped by Add's error for a name already taken.
	ErrExists = errors.New("repos: a repository of that name exists")
	// ErrNotSynced means the repository has no mirror yet: sync it first.
	ErrNotSynced = errors.New("repos: the repository has not been synced yet")
	// ErrProtected is wrapped by Push's error for a protected branch.
	ErrProtected = errors.New("repos: the branch is protected")
	// ErrUnrecorded: a push could not be recorded in the audit log, so
	// it was not made.
	ErrUnrecorded = errors.New("repos: the push could not be recorded in the audit log, so it was not made")
)

// Repository is one row of table repositories, as the API shows it.
type Repository struct {
	ID     string `gorm:"primaryKey" json:"id"`
	Name   string `gorm:"uniqueIndex;not null" json:"name"`
	URL    string `gorm:"not null" json:"url"`
	Branch string `gorm:"not null" json:"branch"`
	// Credential names the instance secret git authenticates with ("":
	// none).
	Credential string `gorm:"not null" json:"credential,omitempty"`
	// RunSetup (an admin's opt-in) runs the repository's setup.sh (or
	// .codumentor/setup.sh) in the setup sandbox before a conversation's
	// workspace is used; SetupNetwork gives that sandbox the host network;
	// SetupEgress instead lets it reach only these destinations (HOST,
	// *.DOMAIN or an IP literal, optionally :PORT, e.g. a package
	// registry) through the egress proxy, its own network having only
	// loopback.
	RunSetup     bool     `gorm:"not null;default:false" json:"run_setup"`
	SetupNetwork bool     `gorm:"not null;default:false" json:"setup_network"`
	SetupEgress  []string `gorm:"serializer:json" json:"setup_egress,omitempty"`
	// Head is the branch's commit at the last sync; IndexedCommit the one
	// the search index was last built for (only a successful index step
	// sets it).
	Head          string    `gorm:"not null" json:"head"`
	IndexedCommit string    `gorm:"not null" json:"indexed_commit"`
	Synced        time.Time `json:"synced,omitzero"`
	Created       time.Time `gorm:"not null" json:"created"`
	Updated       time.Time `gorm:"not null" json:"updated"`
}

func (Repository) TableName() string { return "repositories" }

// Indexer indexes a repository's mirror gitDir from fromCommit ("" for
// none) to toCommit, reporting files done of total (the daemon passes
// the code index's Ingest; nil: syncs only fetch).
type Indexer func(ctx context.Context, repoID, gitDir, fromCommit, toCommit string, progress func(done, total int64)) error

// Options configure a Service.
type Options struct {
	DB      *gorm.DB
	Queue   *jobs.Queue
	Secrets *secrets.Store
	// Dir is <instance>/repos: mirrors, snapshots and scratch space.
	Dir string
	// Git runs host-side git (its TempDir is set to Dir/tmp).
	Git git.Git
	// Sandbox runs checkouts, push commits and the server side of local
	// (file://) remotes.
	Sandbox git.Sandbox
	// Indexer is nil unless retrieval is enabled.
	Indexer Indexer
	// Unindex, if set, removes a deleted repository from the code index.
	Unindex func(ctx context.Context, repoID string) error
	// ProtectedBranches are refused by Push (default main, master).
	ProtectedBranches []string
	// MaxPatchBytes bounds a pushed patch (default 16 MiB).
	MaxPatchBytes int64
	// DefaultAccess is the access entries of a new repository:
	// DefaultAccessAll (the default) or DefaultAccessAdmins.
	DefaultAccess string
	Log           hclog.Logger
}

// Service is the repositories of an instance. Its methods are safe for
// concurrent use.
type Service struct {
	o   Options
	log hclog.Logger
	// snapMu guards snaps and tooLarge, and orders publishing snapshots
	// against collecting them; no checkout runs under it.
	snapMu sync.Mutex
	// snaps are the checkouts under way that calls wait for, by
	// snapshot name; tmps the directories in snapshots/ of every
	// checkout under way, which GCSnapshots leaves alone.
	snaps map[string]*snapFlight
	tmps  map[string]bool
	// tooLarge are the snapshots ("<repository>-<commit>") whose
	// checkout crossed Sandbox.CheckoutBytes: a commit's tree does not
	// shrink, so they are refused without another checkout.
	tooLarge map[string]error
	// readable holds Readable's answers.
	readable readableCache
	// joined, if set (by tests), is called under snapMu when a Snapshot
	// call joins a checkout under way.
	joined func(name string)
}

// maxTooLarge bounds Service.tooLarge; past it the record starts over.
const maxTooLarge = 1024

// DefaultMaxPatchBytes is Options.MaxPatchBytes's default.
const DefaultMaxPatchBytes = 16 << 20

// Migrate creates (or brings up to date) the repositories' tables in
// db, and those they refer to (users, groups, the audit log). upgraded
// is how many existing repositories were given access entries for the
// first time (see migrateAccess).
func Migrate(db *gorm.DB) (upgraded int, err error) {
	if err := db.AutoMigrate(&Repository{}); err != nil {
		return 0, fmt.Errorf("repos: migrating table repositories: %w", err)
	}
	// The access check reads the users and their groups.
	if _, err := auth.NewUsers(db); err != nil {
		return 0, err
	}
	if upgraded, err = migrateAccess(db); err != nil {
		return 0, err
	}
	if err := audit.Migrate(db); err != nil {
		return 0, err
	}
	return upgraded, nil
}

// Open migrates table repositories, makes Dir's layout (0700) and
// registers the job handlers on o.Queue.
func Open(o Options) (*Service, error) {
	if o.Log == nil {
		o.Log = hclog.NewNullLogger()
	}
	if o.ProtectedBranches == nil {
		o.ProtectedBranches = []string{"main", "master"}
	}
	if o.MaxPatchBytes <= 0 {
		o.MaxPatchBytes = DefaultMaxPatchBytes
	}
	for _, d := range []string{o.Dir, filepath.Join(o.Dir, "snapshots"), filepath.Join(o.Dir, "tmp")} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("repos: %w", err)
		}
	}
	o.Git.TempDir = filepath.Join(o.Dir, "tmp")
	o.Git.Sandbox = o.Sandbox
	if o.Git.KnownHosts == "" {
		o.Git.KnownHosts = filepath.Join(o.Dir, "known_hosts")
	}
	switch o.DefaultAccess {
	case "":
		o.DefaultAccess = DefaultAccessAll
	case DefaultAccessAll, DefaultAccessAdmins:
	default:
		return nil, fmt.Errorf("repos: default access %q is not %s or %s", o.DefaultAccess, DefaultAccessAll, DefaultAccessAdmins)
	}
	if n, err := Migrate(o.DB); err != nil {
		return nil, err
	} else if n > 0 {
		o.Log.Warn("repositories now have access entries: the existing ones were given access for all signed-in users (push), as before; restrict them with PUT /api/v1/repositories/{id}/access", "repositories", n)
	}
	if err := stripStoredCredentials(o.DB, o.Log); err != nil {
		return nil, err
	}
	s := &Service{o: o, log: o.Log}
	if o.Queue != nil {
		o.Queue.Handle(KindSync, s.sync)
	}
	return s, nil
}

// stripStoredCredentials removes the credentials that URLs stored before
// git.CheckURL refused them carry (https://TOKEN@host/…): every user could
// list them, and the logs and pushes showed them.
func stripStoredCredentials(db *gorm.DB, log hclog.Logger) error {
	var rs []Repository
	if err := db.Select("id", "name", "url").Find(&rs).Error; err != nil {
		return fmt.Errorf("repos: reading the repositories' URLs: %w", err)
	}
	for _, r := range rs {
		u, changed := git.StripUserinfo(r.URL)
		if !changed {
			continue
		}
		if err := db.Model(&Repository{}).Where("id = ? AND url = ?", r.ID, r.URL).Update("url", u).Error; err != nil {
			return fmt.Errorf("repos: removing the credential from %s's URL: %w", r.ID, err)
		}
		log.Warn("a repository's URL carried a credential: removed; store it as an instance secret (PUT /api/v1/admin/secrets/{name}) and name it as the repository's credential, and revoke the token", "repository", r.ID, "name", r.Name, "url", u)
	}
	return nil
}

// ProtectedBranches are the branches Push refuses.
func (s *Service) ProtectedBranches() []string { return s.o.ProtectedBranches }

// MaxPatchBytes bounds a pushed patch.
func (s *Service) MaxPatchBytes() int64 { return s.o.MaxPatchBytes }

var repoID = regexp.MustCompile(`^repo_[0-9a-f]{24}$`)

// TempFile creates a private temporary file (0600) in the repositories'
// scratch directory; the caller removes it.
func (s *Service) TempFile() (*os.File, error) {
	return os.CreateTemp(filepath.Join(s.o.Dir, "tmp"), "patch-")
}

// Mirror is the bare mirror of repository id.
func (s *Service) Mirror(id string) string { return filepath.Join(s.o.Dir, id+".git") }

// Add is a new repository.
type Add struct {
	Name, URL, Branch, Credential string
	RunSetup, SetupNetwork        bool
	SetupEgress                   []string
	// By is who adds it, for the audit log: an administrator's ID, or
	// auth.CommandLine.
	By string
}

const maxName = 100

// maxSetupEgress bounds a repository's setup allow-list.
const maxSetupEgress = 64

// Add records a repository; nothing is fetched until it is synced. The
// URL and branch are checked here (git.CheckURL, git.CheckBranch), so a
// refused one never reaches git; so is the credential's existence.
func (s *Service) Add(ctx context.Context, a Add) (Repository, error) {
	a.Name = strings.TrimSpace(a.Name)
	if a.Branch == "" {
		a.Branch = "main"
	}
	switch {
	case a.Name == "" || len(a.Name) > maxName || !utf8.ValidString(a.Name) || strings.ContainsFunc(a.Name, unicode.IsControl):
		return Repository{}, fmt.Errorf("%w: name must be 1 to %d bytes of one-line text", ErrInvalid, maxName)
	}
	if a.SetupNetwork && !a.RunSetup {
		return Repository{}, fmt.Errorf("%w: setup_network needs run_setup", ErrInvalid)
	}
	if len(a.SetupEgress) > 0 {
		switch {
		case !a.RunSetup:
			return Repository{}, fmt.Errorf("%w: setup_egress needs run_setup", ErrInvalid)
		case a.SetupNetwork:
			return Repository{}, fmt.Errorf("%w: setup_egress and setup_network exclude each other (the host network has no allow-list)", ErrInvalid)
		case len(a.SetupEgress) > maxSetupEgress:
			return Repository{}, fmt.Errorf("%w: setup_egress: at most %d entries", ErrInvalid, maxSetupEgress)
		}
		if err := egress.ParseAllow(a.SetupEgress); err != nil {
			return Repository{}, fmt.Errorf("%w: setup_egress: %w", ErrInvalid, err)
		}
	}
	if err := git.CheckURL(a.URL); err != nil {
		return Repository{}, fmt.Errorf("%w: url: %w", ErrInvalid, err)
	}
	if err := git.CheckBranch(a.Branch); err != nil {
		return Repository{}, fmt.Errorf("%w: branch: %w", ErrInvalid, err)
	}
	if a.Credential != "" {
		if _, err := s.o.Secrets.Meta(ctx, InstanceOwner, a.Credential); err != nil {
			return Repository{}, fmt.Errorf("%w: credential %q is not an instance secret (PUT /api/v1/admin/secrets/{name} first)", ErrInvalid, a.Credential)
		}
	}
	now := time.Now().UTC()
	r := Repository{ID: randid.New("repo_"), Name: a.Name, URL: a.URL, Branch: a.Branch, Credential: a.Credential, RunSetup: a.RunSetup, SetupNetwork: a.SetupNetwork, SetupEgress: a.SetupEgress, Created: now, Updated: now}
	var n int64
	if err := s.o.DB.WithContext(ctx).Model(&Repository{}).Where("name = ?", a.Name).Count(&n).Error; err != nil {
		return Repository{}, fmt.Errorf("repos: %w", err)
	}
	if n > 0 {
		return Repository{}, fmt.Errorf("%w: %q", ErrExists, a.Name)
	}
	err := s.o.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&r).Error; err != nil {
			return err
		}
		if s.o.DefaultAccess == DefaultAccessAll {
			if err := tx.Create(&AccessEntry{Repository: r.ID, Kind: ForAll, Level: LevelPush}).Error; err != nil {
				return err
			}
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: a.By, Data: map[string]any{
			"action": "repository_add", "repository": r.ID, "name": r.Name, "url": r.URL, "branch": r.Branch,
			"credential": r.Credential, "run_setup": r.RunSetup, "setup_network": r.SetupNetwork, "setup_egress": r.SetupEgress,
			"default_access": s.o.DefaultAccess,
		}})
		return err
	})
	if err != nil {
		return Repository{}, fmt.Errorf("repos: adding a repository: %w", err)
	}
	return r, nil
}

// List returns every repository, by name.
func (s *Service) List(ctx context.Context) ([]Repository, error) {
	rs := []Repository{}
	if err := s.o.DB.WithContext(ctx).Order("name").Find(&rs).Error; err != nil {
		return nil, fmt.Errorf("repos: listing: %w", err)
	}
	return rs, nil
}

// Get returns repository id, or an error wrapping ErrNotFound.
func (s *Service) Get(ctx context.Context, id string) (Repository, error) {
	var r Repository
	if !repoID.MatchString(id) {
		return r, ErrNotFound
	}
	err := s.o.DB.WithContext(ctx).Where("id = ?", id).Take(&r).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return r, ErrNotFound
	}
	if err != nil {
		return r, fmt.Errorf("repos: reading %s: %w", id, err)
	}
	return r, nil
}

// Delete removes repository id's row and mirror; by is who does it (an
// administrator's ID), for the audit log. Conversations on it keep their
// snapshots until they are deleted.
func (s *Service) Delete(ctx context.Context, id, by string) error {
	r, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	err = s.o.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Where("id = ?", id).Delete(&Repository{}).Error; err != nil {
			return err
		}
		if err := tx.Where("repository_id = ?", id).Delete(&AccessEntry{}).Error; err != nil {
			return err
		}
		_, err := audit.Append(tx, audit.Entry{Kind: audit.KindAdmin, User: by, Data: map[string]any{"action": "repository_delete", "repository": id, "name": r.Name}})
		return err
	})
	if err != nil {
		return fmt.Errorf("repos: deleting %s: %w", id, err)
	}
	if err := os.RemoveAll(s.Mirror(id)); err != nil {
		s.log.Warn("removing a deleted repository's mirror failed", "repository", id, "err", err)
	}
	if s.o.Unindex != nil {
		if err := s.o.Unindex(ctx, id); err != nil {
			s.log.Warn("removing a deleted repository from the code index failed", "repository", id, "err", err)
		}
	}
	return nil
}

// Sync enqueues a sync job of repository id, owned by owner ("" for
// codumentorctl), and records who started it in the audit log, in the
// same transaction.
func (s *Service) Sync(ctx context.Context, id, owner string) (jobs.Job, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return jobs.Job{}, err
	}
	return s.o.Queue.Enqueue(ctx, KindSync, syncPayload{Repository: id}, jobs.EnqueueOptions{Owner: owner, MaxAttempts: 3,
		InTx: func(tx *gorm.DB, j jobs.Job) error {
			_, err := audit.Append(tx, syncEntry(r, j, "started", nil))
			return err
		}})
}

// syncEntry is the audit record of sync job j: started, fetched (with the
// head) or failed (with the error), by who started it (its owner, or
// codumentorctl for none).
func syncEntry(r Repository, j jobs.Job, result string, extra map[string]any) audit.Entry {
	d := map[string]any{"repository": r.ID, "name": r.Name, "job": j.ID, "result": result}
	for k, v := range extra {
		d[k] = v
	}
	by := j.Owner
	if by == "" {
		by = auth.CommandLine
	}
	return audit.Entry{Kind: audit.KindRepositorySync, User: by, Data: d}
}

type syncPayload struct {
	Repository string `json:"repository"`
}

// SyncResult is a sync job's result.
type SyncResult struct {
	Head          string `json:"head"`
	IndexedCommit string `json:"indexed_commit"`
}

// credential is repository r's credential for git, or nil.
func (s *Service) credential(ctx context.Context, r Repository) (*git.Credential, error) {
	if r.Credential == "" {
		return nil, nil
	}
	v, err := s.o.Secrets.Value(ctx, InstanceOwner, r.Credential)
	if err != nil {
		return nil, fmt.Errorf("repos: the credential %q of %s: %w", r.Credential, r.Name, err)
	}
	return git.ParseCredential(v), nil
}

// sync is KindSync's handler: fetch into the mirror and record the head,
// then index (when an Indexer is set) and record the indexed commit.
func (s *Service) sync(ctx context.Context, j *jobs.Job) (any, error) {
	var p syncPayload
	if err := json.Unmarshal(j.Payload, &p); err != nil {
		return nil, jobs.Permanent(fmt.Errorf("repos: sync payload: %w", err))
	}
	r, err := s.Get(ctx, p.Repository)
	if err != nil {
		return nil, jobs.Permanent(err)
	}
	// Every attempt's failure is recorded (attempts are bounded by the
	// job's MaxAttempts); a log that cannot be written fails it too.
	failed := func(err error) error {
		if aerr := audit.Write(context.WithoutCancel(ctx), s.o.DB, syncEntry(r, *j, "failed", map[string]any{"error": err.Error(), "attempt": j.Attempts})); aerr != nil {
			return errors.Join(err, aerr)
		}
		return err
	}
	cred, err := s.credential(ctx, r)
	if err != nil {
		return nil, jobs.Permanent(failed(err))
	}
	report := s.reporter(ctx, j, "objects")
	head, err := s.o.Git.Fetch(ctx, s.Mirror(r.ID), r.URL, r.Branch, cred, report)
	if errors.Is(err, git.ErrBadURL) || errors.Is(err, git.ErrBadBranch) {
		return nil, jobs.Permanent(failed(err))
	}
	if err != nil {
		return nil, failed(err)
	}
	now := time.Now().UTC()
	err = s.o.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Repository{}).Where("id = ?", r.ID).
			Updates(map[string]any{"head": head, "synced": now, "updated": now}).Error; err != nil {
			return err
		}
		_, err := audit.Append(tx, syncEntry(r, *j, "fetched", map[string]any{"head": head}))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("repos: recording the head: %w", err)
	}
	res := SyncResult{Head: head, IndexedCommit: r.IndexedCommit}
	if s.o.Indexer == nil || head == r.IndexedCommit {
		return res, nil
	}
	if err := s.o.Indexer(ctx, r.ID, s.Mirror(r.ID), r.IndexedCommit, head, s.reporter(ctx, j, "files")); err != nil {
		return nil, failed(fmt.Errorf("repos: indexing %s at %s: %w", r.Name, head, err))
	}
	if err := s.o.DB.WithContext(ctx).Model(&Repository{}).Where("id = ?", r.ID).
		Updates(map[string]any{"indexed_commit": head, "updated": time.Now().UTC()}).Error; err != nil {
		return nil, fmt.Errorf("repos: recording the indexed commit: %w", err)
	}
	res.IndexedCommit = head
	return res, nil
}

// reporter returns a progress callback that records j's progress at most
// every 200 ms, and always the last step.
func (s *Service) reporter(ctx context.Context, j *jobs.Job, unit string) func(done, total int64) {
	var last time.Time
	return func(done, total int64) {
		if done < total && time.Since(last) < 200*time.Millisecond {
			return
		}
		last = time.Now()
		if err := s.o.Queue.SetProgress(ctx, j, jobs.Progress{Done: done, Total: total, Unit: unit}); err != nil {
			s.log.Warn("recording a sync's progress", "job", j.ID, "err", err)
		}
	}
}

// Resolve returns the commit ref names in repository r's mirror: a
// branch of the mirror or a full commit ID; "" is the repository's
// branch head.
func (s *Service) Resolve(ctx context.Context, r Repository, ref string) (string, error) {
	if r.Head == "" {
		return "", ErrNotSynced
	}
	switch {
	case ref == "":
		return r.Head, nil
	case git.IsCommitID(ref):
	case git.CheckBranch(ref) == nil:
		ref = "refs/heads/" + ref
	default:
		return "", fmt.Errorf("%w: ref %q is neither a branch name nor a full commit ID", ErrInvalid, ref)
	}
	c, err := s.o.Git.Commit(ctx, s.Mirror(r.ID), ref)
	if err != nil {
		return "", fmt.Errorf("%w: ref %q is not in the repository's mirror (sync it, or name a fetched commit)", ErrInvalid, ref)
	}
	return c, nil
}

// snapshotDir is where the snapshot of a repository at commit lives.
func (s *Service) snapshotDir(id, commit string) string {
	return filepath.Join(s.o.Dir, "snapshots", SnapshotName(id, commit))
}

// ErrSnapshot is wrapped by Snapshot's error; its text names no host path.
var ErrSnapshot = errors.New("the repository snapshot could not be prepared")

// ErrSnapshotTooLarge is wrapped by Snapshot's error (it wraps
// ErrSnapshot) for a tree larger than repositories.max_snapshot_bytes.
var ErrSnapshotTooLarge = fmt.Errorf("%w: its files take more disk than repositories.max_snapshot_bytes allows", ErrSnapshot)

// Snapshot returns the directory holding repository id's tree at commit,
// checking it out in a sandbox first if missing. Snapshots are shared
// read-only by every conversation on that commit (as their workspaces'
// lower layer; nothing writes them) and removed by GCSnapshots when none
// uses them. Concurrent calls for one snapshot share one checkout, which
// ends early only when every caller's ctx is done; a checkout never
// delays the snapshots of other commits or GCSnapshots.
func (s *Service) Snapshot(ctx context.Context, id, commit string) (string, error) {
	if !repoID.MatchString(id) || !git.IsCommitID(commit) {
		return "", fmt.Errorf("%w: not a repository and commit: %q %q", ErrInvalid, id, commit)
	}
	d := s.snapshotDir(id, commit)
	if st, err := os.Lstat(d); err == nil && st.IsDir() {
		return d, nil
	}
	name := SnapshotName(id, commit)
	s.snapMu.Lock()
	if st, err := os.Lstat(d); err == nil && st.IsDir() {
		s.snapMu.Unlock()
		return d, nil
	}
	if err := s.tooLarge[name]; err != nil {
		s.snapMu.Unlock()
		return "", err
	}
	f := s.snaps[name]
	if f == nil {
		tmp, err := os.MkdirTemp(filepath.Join(s.o.Dir, "snapshots"), ".tmp-")
		if err != nil {
			s.snapMu.Unlock()
			s.log.Error("making a repository snapshot's directory failed", "err", err)
			return "", fmt.Errorf("%w; the server log has the details", ErrSnapshot)
		}
		cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &snapFlight{done: make(chan struct{}), cancel: cancel}
		if s.snaps == nil {
			s.snaps, s.tmps = map[string]*snapFlight{}, map[string]bool{}
		}
		s.snaps[name] = f
		s.tmps[filepath.Base(tmp)] = true
		go func() {
			defer cancel()
			f.err = s.checkout(cctx, id, commit, tmp, d)
			s.snapMu.Lock()
			if s.snaps[name] == f {
				delete(s.snaps, name)
			}
			delete(s.tmps, filepath.Base(tmp))
			s.snapMu.Unlock()
			close(f.done)
		}()
	} else if s.joined != nil {
		s.joined(name)
	}
	f.waiters++
	s.snapMu.Unlock()
	select {
	case <-f.done:
		if f.err != nil {
			return "", f.err
		}
		return d, nil
	case <-ctx.Done():
		s.snapMu.Lock()
		if f.waiters--; f.waiters == 0 {
			// No one waits: a later call starts afresh.
			f.cancel()
			if s.snaps[name] == f {
				delete(s.snaps, name)
			}
		}
		s.snapMu.Unlock()
		return "", fmt.Errorf("%w: %w", ErrSnapshot, context.Cause(ctx))
	}
}

// snapFlight is a checkout under way, shared by the Snapshot calls that
// wait for it.
type snapFlight struct {
	done   chan struct{}
	err    error // set before done is closed
	cancel context.CancelFunc
	// waiters are the calls waiting (guarded by Service.snapMu).
	waiters int
}

// checkout writes repository id's tree at commit into tmp, outside the
// snapshot lock, and publishes it as d under the lock.
func (s *Service) checkout(ctx context.Context, id, commit, tmp, d string) error {
	name := SnapshotName(id, commit)
	if err := s.o.Sandbox.Checkout(ctx, s.Mirror(id), commit, tmp); err != nil {
		overlay.RemoveAll(tmp)
		// The model and clients see this error: the details (host
		// paths, bwrap's words) go to the log only.
		s.log.Error("checking out a repository snapshot failed", "repository", id, "commit", commit, "err", err)
		if errors.Is(err, git.ErrTooLarge) {
			err := fmt.Errorf("%w (%d MiB); the checkout was stopped and removed", ErrSnapshotTooLarge, s.o.Sandbox.CheckoutBytes>>20)
			s.snapMu.Lock()
			if len(s.tooLarge) >= maxTooLarge || s.tooLarge == nil {
				s.tooLarge = map[string]error{}
			}
			s.tooLarge[name] = err
			s.snapMu.Unlock()
			return err
		}
		return fmt.Errorf("%w; the server log has the details", ErrSnapshot)
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if st, err := os.Lstat(d); err == nil && st.IsDir() {
		// A checkout whose callers had all gone finished first.
		overlay.RemoveAll(tmp)
		return nil
	}
	if err := os.Rename(tmp, d); err != nil {
		overlay.RemoveAll(tmp)
		s.log.Error("keeping a repository snapshot failed", "err", err)
		return fmt.Errorf("%w; the server log has the details", ErrSnapshot)
	}
	return nil
}

// GCSnapshots removes the snapshots no conversation uses: inUse returns
// the "<repository>-<commit>" names in use. It is called with the
// snapshot lock held, so no snapshot is published meanwhile; checkouts
// under way are left alone.
func (s *Service) GCSnapshots(ctx context.Context, inUse func(context.Context) (map[string]bool, error)) ([]string, error) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	used, err := inUse(ctx)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.o.Dir, "snapshots")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	removed := []string{}
	for _, e := range ents {
		if used[e.Name()] || s.tmps[e.Name()] {
			continue
		}
		if err := overlay.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return removed, err
		}
		removed = append(removed, e.Name())
	}
	return removed, nil
}

// SnapshotName is the name of repository id's snapshot at commit: its
// directory's, and the one GCSnapshots' inUse must give it
// (store.Conversations.RepositoryCommits with SnapshotName).
func SnapshotName(id, commit string) string { return id + "-" + commit }

// Push is one push through the gateway.
type Push struct {
	Repository   string // ID
	Base         string // the conversation's base commit
	Branch       string
	Message      string
	Author       git.Author
	User         string // ID, for the log
	Conversation string
	// Patch is the reviewed patch (its digest checked by the caller),
	// read from its start twice: scanned for secrets, then committed.
	Patch io.ReadSeeker
	// AllowOutsideLinks is the user's consent to push symlinks that
	// point outside the tree (OutsideLinks lists them).
	AllowOutsideLinks bool
	// OutsideLinks are the patch's symlinks that point outside the tree
	// (overlay.Patch.OutsideLinks).
	OutsideLinks []string
}

// PushResult is the API's answer.
type PushResult struct {
	Branch string `json:"branch"`
	Commit string `json:"commit"`
	Remote string `json:"remote"`
}

// CheckPushBranch refuses a branch git would refuse (ErrInvalid) or a
// protected one (ErrProtected).
func (s *Service) CheckPushBranch(branch string) error {
	if err := git.CheckBranch(branch); err != nil {
		return fmt.Errorf("%w: branch: %w", ErrInvalid, err)
	}
	// Case-folded: on a remote whose refs live on a case-insensitive
	// filesystem, refs/heads/MAIN is refs/heads/main.
	if slices.ContainsFunc(s.o.ProtectedBranches, func(p string) bool { return strings.EqualFold(p, branch) }) {
		return fmt.Errorf("%w: %q is protected (protected_branches); push to another branch and open a merge request", ErrProtected, branch)
	}
	return nil
}

// Push builds the commit of p.Patch on p.Base inside a sandbox, brings it
// into the mirror from the sandbox's bundle, and pushes exactly that
// commit to the repository's branch with its credential.
func (s *Service) Push(ctx context.Context, p Push) (PushResult, error) {
	if err := s.CheckPushBranch(p.Branch); err != nil {
		return PushResult{}, err
	}
	r, err := s.Get(ctx, p.Repository)
	if err != nil {
		return PushResult{}, err
	}
	return s.push(ctx, p, r)
}

// Refusals of PushWorkspace, wrapped by its error.
var (
	// ErrDiffChanged: the workspace's patch is not the one reviewed.
	ErrDiffChanged = errors.New("repos: the workspace changed since its diff was read")
	// ErrPatchChanging: the workspace changed while its patch was
	// written.
	ErrPatchChanging = errors.New("repos: the workspace changed while its patch was written")
	// ErrEmptyPatch: the patch changes no file.
	ErrEmptyPatch = errors.New("repos: the workspace has no changes to push")
	// ErrPatchTooLarge: the patch is over MaxPatchBytes.
	ErrPatchTooLarge = errors.New("the patch is larger than the push limit")
)

// A PatchError is PushWorkspace's error when its WorkspacePatch failed,
// or the patch could not be kept: Err as it came.
type PatchError struct{ Err error }

func (e *PatchError) Error() string { return "repos: making the workspace's patch: " + e.Err.Error() }
func (e *PatchError) Unwrap() error { return e.Err }

// A WorkspacePatch makes the patch of a conversation's workspace for
// PushWorkspace, within maxBytes (past them its error wraps
// overlay.ErrPatchTooLarge). A nil patch with a nil error is a workspace
// without changes.
type WorkspacePatch func(maxBytes int64) (*overlay.Patch, error)

// PushWorkspace pushes a conversation's workspace as the user reviewed
// it: Push with p.Patch and p.OutsideLinks taken from the patch that
// patch makes, once the repository and branch are checked. That patch
// must have the hex SHA-256 reviewed, which the user read (else
// ErrDiffChanged), and change a file (else ErrEmptyPatch). It is kept in
// a private temporary file within MaxPatchBytes (ErrPatchTooLarge), so
// the patch scanned for secrets is the one committed.
func (s *Service) PushWorkspace(ctx context.Context, p Push, reviewed string, patch WorkspacePatch) (PushResult, error) {
	if err := s.CheckPushBranch(p.Branch); err != nil {
		return PushResult{}, err
	}
	r, err := s.Get(ctx, p.Repository)
	if err != nil {
		return PushResult{}, err
	}
	f, size, digest, outside, err := s.keepPatch(patch)
	if err != nil {
		return PushResult{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if digest != reviewed {
		return PushResult{}, ErrDiffChanged
	}
	if empty, err := noFiles(f); err != nil {
		return PushResult{}, &PatchError{Err: err}
	} else if empty || size == 0 {
		return PushResult{}, ErrEmptyPatch
	}
	p.Patch, p.OutsideLinks = f, outside
	return s.push(ctx, p, r)
}

// keepPatch writes the patch that patch makes to a private temporary
// file within MaxPatchBytes, and returns it (at offset 0), its size, its
// SHA-256 and its symlinks that point outside the tree. The caller
// removes the file.
func (s *Service) keepPatch(patch WorkspacePatch) (*os.File, int64, string, []string, error) {
	max := s.o.MaxPatchBytes
	tooLarge := func(err error) error {
		return fmt.Errorf("%w of %d bytes (repositories.max_push_bytes): %w", ErrPatchTooLarge, max, err)
	}
	p, err := patch(max)
	if errors.Is(err, overlay.ErrPatchTooLarge) {
		return nil, 0, "", nil, tooLarge(err)
	}
	if err != nil {
		return nil, 0, "", nil, &PatchError{Err: err}
	}
	if p == nil {
		return nil, 0, "", nil, ErrEmptyPatch
	}
	defer p.Close()
	f, err := s.TempFile()
	if err != nil {
		return nil, 0, "", nil, &PatchError{Err: err}
	}
	h := sha256.New()
	lw := &capped{w: io.MultiWriter(f, h), left: max}
	n, err := p.WriteTo(lw)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		if lw.over {
			return nil, 0, "", nil, tooLarge(errors.New("the patch text is over the limit"))
		}
		return nil, 0, "", nil, fmt.Errorf("%w: %w", ErrPatchChanging, err)
	}
	return f, n, hex.EncodeToString(h.Sum(nil)), p.OutsideLinks(), nil
}

// capped fails a write past left bytes.
type capped struct {
	w    io.Writer
	left int64
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, fmt.Errorf("over the size limit")
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// noFiles reports whether the patch in f (read from its start, and
// rewound) changes no file: only comment lines.
func noFiles(f *os.File) (bool, error) {
	defer f.Seek(0, io.SeekStart)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("diff --git ")) {
			return false, nil
		}
	}
	return true, sc.Err()
}

// push is Push of p to r, its branch checked.
func (s *Service) push(ctx context.Context, p Push, r Repository) (PushResult, error) {
	cred, err := s.credential(ctx, r)
	if err != nil {
		return PushResult{}, err
	}
	if len(p.OutsideLinks) > 0 && !p.AllowOutsideLinks {
		return PushResult{}, &OutsideLinksError{Paths: p.OutsideLinks}
	}
	if err := s.scanSecrets(ctx, p, r); err != nil {
		var sd *SecretInDiffError
		if errors.As(err, &sd) {
			s.log.Warn("a push was refused: its patch holds a secret's value", "user", p.User, "conversation", p.Conversation, "repository", r.ID, "file", sd.File, "line", sd.Line, "secret", sd.Secret)
			e := pushEntry(p, r, "", "refused")
			d := e.Data.(map[string]any)
			d["reason"], d["file"], d["line"], d["secret"] = "secret_in_diff", sd.File, sd.Line, sd.Secret
			if aerr := audit.Write(context.WithoutCancel(ctx), s.o.DB, e); aerr != nil {
				s.log.Error("recording a refused push in the audit log failed", "repository", r.ID, "err", aerr)
			}
		}
		return PushResult{}, err
	}
	mirror := s.Mirror(r.ID)
	out, err := os.MkdirTemp(filepath.Join(s.o.Dir, "tmp"), "push-")
	if err != nil {
		return PushResult{}, err
	}
	defer overlay.RemoveAll(out)
	commit, err := s.o.Sandbox.Commit(ctx, mirror, p.Base, p.Patch, p.Author, p.Message, out)
	if errors.Is(err, git.ErrBadMessage) {
		return PushResult{}, fmt.Errorf("%w: message: %w", ErrInvalid, err)
	}
	if err != nil {
		return PushResult{}, fmt.Errorf("repos: building the commit: %w", err)
	}
	ref := "refs/codumentor/push/" + strings.TrimPrefix(filepath.Base(out), "push-")
	got, err := s.o.Git.FetchBundle(ctx, mirror, filepath.Join(out, git.BundleName), ref)
	defer func() {
		// Left behind, the ref keeps the commit's objects in the mirror
		// (nothing is shown or pushed from it); the push itself stands.
		if err := s.o.Git.DeleteRef(context.WithoutCancel(ctx), mirror, ref); err != nil {
			s.log.Error("removing a push's ref from the mirror failed; remove it with git update-ref -d", "repository", r.ID, "ref", ref, "err", err)
		}
	}()
	if err != nil {
		return PushResult{}, fmt.Errorf("repos: taking the commit into the mirror: %w", err)
	}
	parent, perr := s.o.Git.Commit(ctx, mirror, got+"^")
	if got != commit || perr != nil || parent != p.Base {
		return PushResult{}, fmt.Errorf("repos: the sandbox's bundle holds %s (parent %s), not %s on %s", got, parent, commit, p.Base)
	}
	// A push leaves the host: it cannot share a transaction with its
	// record, so it is recorded before it is made (and not made unless
	// recorded), and its outcome after.
	if err := audit.Write(ctx, s.o.DB, pushEntry(p, r, commit, "pushing")); err != nil {
		s.log.Error("a push was not made: it could not be recorded in the audit log", "repository", r.ID, "commit", commit, "err", err)
		return PushResult{}, fmt.Errorf("%w: %w", ErrUnrecorded, err)
	}
	if err := s.o.Git.Push(ctx, mirror, r.URL, commit, p.Branch, cred); err != nil {
		s.recordPush(ctx, p, r, commit, err)
		return PushResult{}, fmt.Errorf("repos: pushing: %w", err)
	}
	s.recordPush(ctx, p, r, commit, nil)
	return PushResult{Branch: p.Branch, Commit: commit, Remote: r.URL}, nil
}

// scanSecrets refuses p (a *SecretInDiffError) if its patch adds, or its
// message holds, the value of one of the pushing user's secrets or of
// r's credential, and rewinds the patch.
func (s *Service) scanSecrets(ctx context.Context, p Push, r Repository) error {
	values := map[string]string{}
	if p.User != "" {
		names, err := s.o.Secrets.Names(ctx, p.User)
		if err != nil {
			return fmt.Errorf("repos: listing the user's secrets to look for them in the patch: %w", err)
		}
		for _, n := range names {
			v, err := s.o.Secrets.Value(ctx, p.User, n)
			if err != nil {
				return fmt.Errorf("repos: reading secret %s to look for it in the patch: %w", n, err)
			}
			values[n] = v
		}
	}
	if r.Credential != "" {
		v, err := s.o.Secrets.Value(ctx, InstanceOwner, r.Credential)
		if err != nil {
			return fmt.Errorf("repos: the credential %q of %s: %w", r.Credential, r.Name, err)
		}
		name := "the repository's credential " + r.Credential
		values[name] = v
		if c := git.ParseCredential(v); c.Password != "" && c.Password != v {
			values[name+" (its token)"] = c.Password
		}
	}
	if len(values) == 0 {
		return nil
	}
	sc := agentcore.NewSecretScanner(values)
	if name, ok := sc.Find(p.Message); ok {
		return &SecretInDiffError{Secret: name}
	}
	if _, err := p.Patch.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := scanPatch(p.Patch, sc, s.o.MaxPatchBytes); err != nil {
		return err
	}
	_, err := p.Patch.Seek(0, io.SeekStart)
	return err
}

// ErrOutsideLinks is wrapped by Push's error (an *OutsideLinksError) for
// a patch with symlinks that point outside the tree, pushed without the
// user's consent (Push.AllowOutsideLinks).
var ErrOutsideLinks = errors.New("repos: the patch has symlinks that point outside the tree")

// OutsideLinksError names the symlinks that point outside the tree.
type OutsideLinksError struct{ Paths []string }

func (e *OutsideLinksError) Error() string {
	return fmt.Sprintf("%s: %s", ErrOutsideLinks, strings.Join(e.Paths, ", "))
}

func (e *OutsideLinksError) Unwrap() error { return ErrOutsideLinks }

// pushEntry is the audit record of a push: result is pushing (before it
// is made), ok or refused (by the remote).
func pushEntry(p Push, r Repository, commit, result string) audit.Entry {
	return audit.Entry{Kind: audit.KindPush, User: p.User, Data: map[string]any{
		"conversation": p.Conversation, "repository": r.ID, "remote": r.URL, "branch": p.Branch, "commit": commit, "result": result,
	}}
}

// recordPush is the one place a push's outcome is recorded: the log and
// the audit log (kind push, with the remote's verdict).
func (s *Service) recordPush(ctx context.Context, p Push, r Repository, commit string, err error) {
	result := "ok"
	if err != nil {
		result = "refused"
		s.log.Warn("push failed", "user", p.User, "conversation", p.Conversation, "repository", r.ID, "remote", r.URL, "branch", p.Branch, "commit", commit, "err", err)
	} else {
		s.log.Info("pushed", "user", p.User, "conversation", p.Conversation, "repository", r.ID, "remote", r.URL, "branch", p.Branch, "commit", commit)
	}
	if aerr := audit.Write(context.WithoutCancel(ctx), s.o.DB, pushEntry(p, r, commit, result)); aerr != nil {
		s.log.Error("recording a push in the audit log failed", "repository", r.ID, "commit", commit, "err", aerr)
	}
}
