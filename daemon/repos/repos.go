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
	"io/fs"
	"maps"
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
	ID   string `gorm:"primaryKey" json:"id"`
	Name string `gorm:"uniqueIndex;not null" json:"name"`
	URL  string `gorm:"not null" json:"url"`
	// Branch is the default branch: the one a conversation starts on and
	// a search without branch: finds.
	Branch string `gorm:"not null" json:"branch"`
	// Branches are every branch mirrored and indexed, Branch first (a
	// repository added before there were several has Branch alone).
	Branches []string `gorm:"serializer:json" json:"branches"`
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
	// Head is the default branch's commit at the last sync;
	// IndexedCommit the one the search index was last built for (only a
	// successful index step sets it).
	Head          string `gorm:"not null" json:"head"`
	IndexedCommit string `gorm:"not null" json:"indexed_commit"`
	// Heads and IndexedCommits are Head and IndexedCommit of every
	// branch, by name.
	Heads          map[string]string `gorm:"serializer:json" json:"heads,omitempty"`
	IndexedCommits map[string]string `gorm:"serializer:json" json:"indexed_commits,omitempty"`
	Synced         time.Time         `json:"synced,omitzero"`
	Created        time.Time         `gorm:"not null" json:"created"`
	Updated        time.Time         `gorm:"not null" json:"updated"`
}

func (Repository) TableName() string { return "repositories" }

// AfterFind gives a repository added before Branches its one branch.
func (r *Repository) AfterFind(*gorm.DB) error {
	if len(r.Branches) == 0 && r.Branch != "" {
		r.Branches = []string{r.Branch}
	}
	return nil
}

// Indexed is the commit branch b was last indexed at ("": never).
func (r Repository) Indexed(b string) string {
	if b == r.Branch {
		return r.IndexedCommit
	}
	return r.IndexedCommits[b]
}

// MaxBranches bounds a repository's branches: each is fetched, indexed
// and walked on every sync.
const MaxBranches = 16

// checkBranches refuses a list of branches git would refuse, a
// duplicate, or more than MaxBranches.
func checkBranches(bs []string) error {
	if len(bs) > MaxBranches {
		return fmt.Errorf("%w: branches: at most %d", ErrInvalid, MaxBranches)
	}
	for i, b := range bs {
		if err := git.CheckBranch(b); err != nil {
			return fmt.Errorf("%w: branches: %w", ErrInvalid, err)
		}
		if slices.Contains(bs[:i], b) {
			return fmt.Errorf("%w: branches: %q is listed twice", ErrInvalid, b)
		}
	}
	return nil
}

// Indexer indexes branch ("": the default one) of a repository's mirror
// gitDir from fromCommit ("" for none: the branch was not indexed yet)
// to toCommit, reporting files done of total (the daemon passes the code
// index's Ingest, each branch under its own key; nil: syncs only fetch).
type Indexer func(ctx context.Context, repoID, branch, gitDir, fromCommit, toCommit string, progress func(done, total int64)) error

// Options configure a Service.
type Options struct {
	DB      *gorm.DB
	Queue   *jobs.Queue
	Secrets *secrets.Store
	// Dir is <instance>/repos: mirrors, snapshots and scratch space.
	Dir string
	// Nodes, on a server that shares its database with others, lists
	// the nodes alive, and Node is this one: each keeps its own mirrors
	// and index files, so a sync is one job per node. Nil: the only
	// server.
	Nodes func(context.Context) ([]string, error)
	Node  string
	// SharedIndex: the nodes share one code index (Weaviate), which one
	// node's job of a sync updates.
	SharedIndex bool
	// Git runs host-side git (its TempDir is set to Dir/tmp).
	Git git.Git
	// Sandbox runs checkouts, push commits and the server side of local
	// (file://) remotes.
	Sandbox git.Sandbox
	// Indexer is nil unless retrieval is enabled.
	Indexer Indexer
	// Unindex, if set, removes a deleted repository's branch ("": the
	// default one) from the code index.
	Unindex func(ctx context.Context, repoID, branch string) error
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
	// Branches are the branches to mirror and index, the default first
	// (nil: Branch alone). Branch, if set too, must be the first.
	Branches               []string
	RunSetup, SetupNetwork bool
	SetupEgress            []string
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
	switch {
	case a.Branch == "" && len(a.Branches) > 0:
		a.Branch = a.Branches[0]
	case a.Branch == "":
		a.Branch = "main"
	}
	if len(a.Branches) == 0 {
		a.Branches = []string{a.Branch}
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
	if err := checkBranches(a.Branches); err != nil {
		return Repository{}, err
	}
	if a.Branches[0] != a.Branch {
		return Repository{}, fmt.Errorf("%w: branch %q must be the first of branches (the default branch), not %q", ErrInvalid, a.Branch, a.Branches[0])
	}
	if a.Credential != "" {
		if _, err := s.o.Secrets.Meta(ctx, InstanceOwner, a.Credential); err != nil {
			return Repository{}, fmt.Errorf("%w: credential %q is not an instance secret (PUT /api/v1/admin/secrets/{name} first)", ErrInvalid, a.Credential)
		}
	}
	now := time.Now().UTC()
	r := Repository{ID: randid.New("repo_"), Name: a.Name, URL: a.URL, Branch: a.Branch, Branches: a.Branches, Credential: a.Credential, RunSetup: a.RunSetup, SetupNetwork: a.SetupNetwork, SetupEgress: a.SetupEgress, Created: now, Updated: now}
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
			"action": "repository_add", "repository": r.ID, "name": r.Name, "url": r.URL, "branch": r.Branch, "branches": r.Branches,
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
		for i, b := range r.Branches {
			if i == 0 {
				b = ""
			}
			if err := s.o.Unindex(ctx, id, b); err != nil {
				s.log.Warn("removing a deleted repository from the code index failed", "repository", id, "branch", r.Branches[i], "err", err)
			}
		}
	}
	return nil
}

// Sync enqueues a sync job of repository id, owned by owner ("" for
// codumentorctl), and records who started it in the audit log, in the
// same transaction.
//
// Among several servers, every node fetches into its own mirror and
// indexes into its own index, each in a job of its own: the job returned
// is this node's.
func (s *Service) Sync(ctx context.Context, id, owner string) (jobs.Job, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return jobs.Job{}, err
	}
	nodes := []string{""}
	if s.o.Nodes != nil {
		if nodes, err = s.o.Nodes(ctx); err != nil {
			return jobs.Job{}, err
		}
		if !slices.Contains(nodes, s.o.Node) {
			nodes = append(nodes, s.o.Node)
		}
	}
	var mine jobs.Job
	for _, n := range nodes {
		j, err := s.syncOn(ctx, r, owner, n, s.o.SharedIndex && n != s.o.Node)
		if err != nil {
			return jobs.Job{}, err
		}
		if n == s.o.Node {
			mine = j
		}
	}
	return mine, nil
}

// syncOn enqueues the sync of r on node ("": any), of its mirror only
// if mirrorOnly.
func (s *Service) syncOn(ctx context.Context, r Repository, owner, node string, mirrorOnly bool) (jobs.Job, error) {
	return s.o.Queue.Enqueue(ctx, KindSync, syncPayload{Repository: r.ID, MirrorOnly: mirrorOnly}, jobs.EnqueueOptions{Owner: owner, MaxAttempts: 3, Node: node,
		InTx: func(tx *gorm.DB, j jobs.Job) error {
			_, err := audit.Append(tx, syncEntry(r, j, "started", nil))
			return err
		}})
}

// CatchUp syncs, on this node, the repositories that others synced and
// whose mirror this node lacks (a node new to the deployment, or one
// whose mirror was removed): on its own node only.
func (s *Service) CatchUp(ctx context.Context) error {
	if s.o.Nodes == nil {
		return nil
	}
	rs, err := s.List(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Head == "" {
			continue
		}
		if _, err := os.Stat(s.Mirror(r.ID)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if _, err := s.syncOn(ctx, r, "", s.o.Node, s.o.SharedIndex); err != nil {
			return err
		}
	}
	return nil
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
	// MirrorOnly: fetch into this node's mirror, and leave the index,
	// shared by the nodes (SharedIndex), to another node's job.
	MirrorOnly bool `json:"mirror_only,omitempty"`
}

// SyncResult is a sync job's result.
type SyncResult struct {
	Head          string `json:"head"`
	IndexedCommit string `json:"indexed_commit"`
	// Heads and IndexedCommits are every branch's, by name.
	Heads          map[string]string `json:"heads"`
	IndexedCommits map[string]string `json:"indexed_commits"`
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
	// Every branch is fetched, the default one first: a default branch
	// that cannot be fetched fails the sync as before; another one is
	// left out of this sync (its last index stays), and the sync fails
	// at the end saying which.
	report := s.reporter(ctx, j, "objects")
	heads := make(map[string]string, len(r.Branches))
	var skipped []error
	for _, b := range r.Branches {
		head, err := s.o.Git.Fetch(ctx, s.Mirror(r.ID), r.URL, b, cred, report)
		switch {
		case b == r.Branch && (errors.Is(err, git.ErrBadURL) || errors.Is(err, git.ErrBadBranch)):
			return nil, jobs.Permanent(failed(err))
		case b == r.Branch && err != nil:
			return nil, failed(err)
		case err != nil:
			skipped = append(skipped, fmt.Errorf("branch %s: %w", b, err))
			continue
		}
		heads[b] = head
	}
	head := heads[r.Branch]
	now := time.Now().UTC()
	err = s.o.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Model(&Repository{ID: r.ID}).Select("head", "heads", "synced", "updated").
			Updates(Repository{Head: head, Heads: heads, Synced: now, Updated: now}).Error; err != nil {
			return err
		}
		_, err := audit.Append(tx, syncEntry(r, *j, "fetched", map[string]any{"head": head, "heads": heads}))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("repos: recording the head: %w", err)
	}
	res := SyncResult{Head: head, IndexedCommit: r.IndexedCommit, Heads: heads, IndexedCommits: maps.Clone(r.IndexedCommits)}
	if res.IndexedCommits == nil {
		res.IndexedCommits = map[string]string{}
	}
	if r.IndexedCommit != "" {
		res.IndexedCommits[r.Branch] = r.IndexedCommit
	}
	// Each branch is indexed from the commit it was indexed at before,
	// under its own key: only the files whose blobs changed on that
	// branch are read. Each one's success is recorded before the next
	// starts, so a failure keeps what was done.
	for _, b := range r.Branches {
		to, from := heads[b], s.indexedHere(r, b)
		if s.o.Indexer == nil || p.MirrorOnly || to == "" || to == from {
			continue
		}
		key := b
		if b == r.Branch {
			key = ""
		}
		if err := s.o.Indexer(ctx, r.ID, key, s.Mirror(r.ID), from, to, s.reporter(ctx, j, "files")); err != nil {
			return nil, failed(fmt.Errorf("repos: indexing %s's branch %s at %s: %w", r.Name, b, to, err))
		}
		res.IndexedCommits[b] = to
		if b == r.Branch {
			res.IndexedCommit = to
		}
		if err := s.recordIndexed(ctx, r, b, to); err != nil {
			return nil, fmt.Errorf("repos: recording the indexed commit: %w", err)
		}
	}
	if len(skipped) > 0 {
		return nil, failed(fmt.Errorf("repos: %s: fetched and indexed all but: %w", r.Name, errors.Join(skipped...)))
	}
	return res, nil
}

// nodeKey is the key in IndexedCommits of branch b as indexed on node:
// among several servers each indexes into its own files, so each
// continues from its own last commit. A colon is in no branch name.
func nodeKey(node, b string) string { return node + ":" + b }

// indexedHere is the commit branch b of r was last indexed at in this
// node's index.
func (s *Service) indexedHere(r Repository, b string) string {
	if s.o.Nodes == nil || s.o.SharedIndex {
		return r.Indexed(b)
	}
	return r.IndexedCommits[nodeKey(s.o.Node, b)]
}

// recordIndexed records that branch b of r is indexed at commit to, here
// (and, among several servers, on this node): the map is read again in
// the transaction, so that nodes indexing at once keep each other's.
func (s *Service) recordIndexed(ctx context.Context, r Repository, b, to string) error {
	return s.o.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var cur Repository
		if err := tx.Select("id", "indexed_commits").Where("id = ?", r.ID).Take(&cur).Error; err != nil {
			return err
		}
		m := cur.IndexedCommits
		if m == nil {
			m = map[string]string{}
		}
		m[b] = to
		if s.o.Nodes != nil && !s.o.SharedIndex {
			m[nodeKey(s.o.Node, b)] = to
		}
		cols := map[string]any{"indexed_commits": jsonColumn(m), "updated": time.Now().UTC()}
		if b == r.Branch {
			cols["indexed_commit"] = to
		}
		return tx.Model(&Repository{}).Where("id = ?", r.ID).Updates(cols).Error
	})
}

// jsonColumn is m as a serializer:json column holds it, for Updates
// with a map (which does not apply the field's serializer).
func jsonColumn(m map[string]string) string {
	b, _ := json.Marshal(m)
	return string(b)
}

// Branches lists every repository's branches by ID, the default first
// (the code search's Searcher.Branches).
func (s *Service) Branches(ctx context.Context) (map[string][]string, error) {
	var rs []Repository
	if err := s.o.DB.WithContext(ctx).Select("id", "branch", "branches").Find(&rs).Error; err != nil {
		return nil, fmt.Errorf("repos: listing the branches: %w", err)
	}
	m := make(map[string][]string, len(rs))
	for _, r := range rs {
		m[r.ID] = r.Branches
	}
	return m, nil
}

// BranchOf finds the branch of r to search for commit: the one indexed
// at commit (indexed true), else the first (default first) whose
// fetched head has commit in its history, else "".
func (s *Service) BranchOf(ctx context.Context, r Repository, commit string) (branch string, indexed bool, err error) {
	for _, b := range r.Branches {
		if r.Indexed(b) == commit {
			return b, true, nil
		}
	}
	if !git.IsCommitID(commit) {
		return "", false, fmt.Errorf("%w: %q is not a full commit ID", ErrInvalid, commit)
	}
	if _, err := s.o.Git.Commit(ctx, s.Mirror(r.ID), commit); err != nil {
		return "", false, nil // not in the mirror: on no branch
	}
	for _, b := range r.Branches {
		if r.Heads[b] == "" && !(b == r.Branch && r.Head != "") {
			continue // never fetched: not in the mirror
		}
		ok, err := s.o.Git.IsAncestor(ctx, s.Mirror(r.ID), commit, b)
		if err != nil {
			return "", false, fmt.Errorf("repos: is %s on %s's branch %s: %w", commit, r.Name, b, err)
		}
		if ok {
			return b, false, nil
		}
	}
	return "", false, nil
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
