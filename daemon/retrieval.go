package daemon

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/llm"
	"github.com/codumentor/codumentor/integrations/retrieval"
)

// openCodeIndex opens the code index of the retrieval: section (the
// embedded SQLite backend beside the instance database by default, or
// Weaviate), and returns the embedded index's files for the server to
// close. The sync job indexes through its Ingest.
func openCodeIndex(ctx context.Context, cfg config.Config, inst config.Instance, db *gorm.DB, log hclog.Logger) (*retrieval.Index, indexFiles, error) {
	var backend retrieval.Backend
	var files indexFiles
	switch cfg.Retrieval.Backend {
	case config.RetrievalWeaviate:
		w := cfg.Retrieval.Weaviate
		b, err := retrieval.NewWeaviate(ctx, retrieval.WeaviateOptions{URL: w.URL, APIKey: w.APIKey, Class: w.Class})
		if err != nil {
			return nil, nil, fmt.Errorf("retrieval.backend weaviate: %w", err)
		}
		backend = b
	default:
		b, dbs, err := openEmbeddedIndex(ctx, inst, db)
		if err != nil {
			return nil, nil, err
		}
		backend, files = b, dbs
	}
	o := retrieval.Options{
		Backend:      backend,
		MaxFileBytes: cfg.Retrieval.MaxFileBytes,
		MaxFiles:     cfg.Retrieval.MaxFiles,
		MaxBytes:     cfg.Retrieval.MaxRepositoryBytes,
		Log:          log.Named("retrieval").Info,
	}
	if m := cfg.Retrieval.Embeddings.Model; m != "" {
		c, err := llm.New(llm.Config{BaseURL: cfg.LLM.BaseURL, Model: cmp.Or(cfg.LLM.Model, m), APIKey: cfg.LLM.APIKey, EmbeddingModel: m, Timeout: cfg.LLM.Timeout.Std()})
		if err != nil {
			files.close()
			return nil, nil, fmt.Errorf("retrieval.embeddings: %w", err)
		}
		o.Embedder = c
	}
	ix, err := retrieval.New(o)
	if err != nil {
		files.close()
		return nil, nil, err
	}
	return ix, files, nil
}

// newSearcher is ix's Searcher for GET /api/v1/search and the search_code
// tool.
//
// search_code searches the conversation's repository by default, on the
// branch its commit is indexed on (Scope: conversationScope); a
// repository named that is not in table repositories is not found
// (Exists); every search is within the repositories the user may read
// (Readable: the access entries, as GET /api/v1/repositories shows
// them), the index filtering by them before it ranks and limits; branch:
// chooses among the repositories' branches (Branches).
func newSearcher(ix *retrieval.Index, convs *store.Conversations, rs *repos.Service) *retrieval.Searcher {
	return &retrieval.Searcher{Index: ix, Readable: rs.Readable, Branches: rs.Branches,
		Scope: func(ctx context.Context, user, conversation string) (retrieval.Scope, error) {
			c, err := convs.Get(ctx, user, conversation)
			if err != nil {
				return retrieval.Scope{}, err
			}
			return conversationScope(ctx, rs, c.Repository, c.BaseCommit)
		}, Exists: func(ctx context.Context, repository string) (bool, error) {
			_, err := rs.Get(ctx, repository)
			if errors.Is(err, repos.ErrNotFound) {
				return false, nil
			}
			return err == nil, err
		}}
}

// conversationScope is search_code's default in a conversation on
// repository at commit: the branch indexed at that commit; when none is
// (the branch moved on since, or the commit is not the head of a branch
// when it was indexed), the first branch that has the commit in its
// history, as it is indexed, saying so; else the default branch, saying
// so. The index holds each branch at one commit: the workspace's own
// files are what the file tools read.
func conversationScope(ctx context.Context, rs *repos.Service, repository, commit string) (retrieval.Scope, error) {
	sc := retrieval.Scope{Repository: repository}
	if repository == "" || commit == "" {
		return sc, nil
	}
	r, err := rs.Get(ctx, repository)
	if errors.Is(err, repos.ErrNotFound) {
		return sc, nil // the search answers that it is gone
	}
	if err != nil {
		return sc, err
	}
	b, exact, err := rs.BranchOf(ctx, r, commit)
	if err != nil {
		return sc, err
	}
	switch {
	case exact:
		sc.Branch = b
	case b != "":
		sc.Branch = b
		sc.Note = fmt.Sprintf("Note: the index does not hold this conversation's commit %s; these results are from branch %s as indexed at %s, which has it in its history: files may differ from the workspace (read them there).", short(commit), b, indexedAt(r, b))
	default:
		sc.Note = fmt.Sprintf("Note: this conversation's commit %s is on no indexed branch; these results are from the default branch %s as indexed at %s: files may differ from the workspace (read them there).", short(commit), r.Branch, indexedAt(r, r.Branch))
	}
	return sc, nil
}

// short is a commit's abbreviation in notes.
func short(commit string) string { return commit[:min(len(commit), 12)] }

// indexedAt names the commit branch b of r is indexed at.
func indexedAt(r repos.Repository, b string) string {
	if c := r.Indexed(b); c != "" {
		return short(c)
	}
	return "no commit yet (not indexed)"
}

// openEmbeddedIndex opens the embedded code index: retrieval.Shards
// files beside the instance database (data/index-N.db, 0600), each with
// its own writer. An index that an older version built in the instance
// database (retrieval_chunks has rows) keeps working there, with one
// writer, until its repositories are removed.
func openEmbeddedIndex(ctx context.Context, inst config.Instance, db *gorm.DB) (*retrieval.SQLite, indexFiles, error) {
	sqlDB, err := db.DB()
	if err != nil {
		return nil, nil, err
	}
	// Only a SQLite instance database can hold an index of an older
	// version: there was no PostgreSQL backend then.
	var legacy bool
	if store.Backend(db) == store.BackendSQLite {
		err = sqlDB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'retrieval_chunks')`).Scan(&legacy)
	}
	if err == nil && legacy {
		err = sqlDB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM retrieval_chunks)`).Scan(&legacy)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("retrieval: looking for an index in the instance database: %w", err)
	}
	if legacy {
		ix, err := retrieval.NewSQLite(ctx, sqlDB)
		return ix, nil, err
	}
	var dbs []*sql.DB
	for i := range retrieval.Shards {
		d, err := retrieval.OpenShard(ctx, filepath.Join(inst.DataDir(), retrieval.ShardFile(i)))
		if err != nil {
			for _, d := range dbs {
				d.Close()
			}
			return nil, nil, err
		}
		dbs = append(dbs, d)
	}
	ix, err := retrieval.NewSQLite(ctx, dbs...)
	if err != nil {
		indexFiles(dbs).close()
		return nil, nil, err
	}
	return ix, dbs, nil
}

// indexFiles are the embedded index's databases, which the server
// closes when it stops.
type indexFiles []*sql.DB

func (f indexFiles) close() {
	for _, d := range f {
		d.Close()
	}
}

// codeIndex hands the repositories' sync jobs the code index (nil: not
// open).
type codeIndex struct{ ix *retrieval.Index }

// ingest indexes branch ("": the default one) of repository repoID
// under its own key (retrieval.BranchKey).
func (ix codeIndex) ingest(ctx context.Context, repoID, branch, gitDir, from, to string, progress func(done, total int64)) error {
	if ix.ix == nil {
		return fmt.Errorf("the code index is not open")
	}
	err := ix.ix.Ingest(ctx, retrieval.BranchKey(repoID, branch), gitDir, from, to, progress)
	if errors.Is(err, retrieval.ErrTooManyEntries) || errors.Is(err, retrieval.ErrBadCommit) {
		// The same commit fails the same way again: not retried, nor
		// taken over by a restarted server.
		return jobs.Permanent(err)
	}
	return err
}

func (ix codeIndex) drop(ctx context.Context, repoID, branch string) error {
	if ix.ix == nil {
		return nil
	}
	return ix.ix.DeleteRepository(ctx, retrieval.BranchKey(repoID, branch))
}
