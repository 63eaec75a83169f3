package daemon

import (
	"cmp"
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"
	"gorm.io/gorm"

	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/integrations/llm"
	"github.com/codumentor/codumentor/integrations/retrieval"
)

// startRetrieval builds the code index of the retrieval: section (the
// embedded SQLite backend in the instance database by default, or
// Weaviate), its Searcher for GET /api/v1/search, and registers the
// search_code tool. The sync job indexes through s.search.Index.Ingest.
//
// Scope (the conversation's repository, search_code's default) and
// Readable (the repositories a user may read) stay nil until
// conversations have repositories: every user searches every repository.
func (s *server) startRetrieval(ctx context.Context, cfg config.Config, db *gorm.DB, log hclog.Logger) error {
	var backend retrieval.Backend
	switch cfg.Retrieval.Backend {
	case config.RetrievalWeaviate:
		w := cfg.Retrieval.Weaviate
		b, err := retrieval.NewWeaviate(ctx, retrieval.WeaviateOptions{URL: w.URL, APIKey: w.APIKey, Class: w.Class})
		if err != nil {
			return fmt.Errorf("retrieval.backend weaviate: %w", err)
		}
		backend = b
	default:
		sqlDB, err := db.DB()
		if err != nil {
			return err
		}
		b, err := retrieval.NewSQLite(ctx, sqlDB)
		if err != nil {
			return err
		}
		backend = b
	}
	o := retrieval.Options{
		Backend:      backend,
		MaxFileBytes: cfg.Retrieval.MaxFileBytes,
		Log:          log.Named("retrieval").Info,
	}
	if m := cfg.Retrieval.Embeddings.Model; m != "" {
		c, err := llm.New(llm.Config{BaseURL: cfg.LLM.BaseURL, Model: cmp.Or(cfg.LLM.Model, m), APIKey: cfg.LLM.APIKey, EmbeddingModel: m, Timeout: cfg.LLM.Timeout.Std()})
		if err != nil {
			return fmt.Errorf("retrieval.embeddings: %w", err)
		}
		o.Embedder = c
	}
	ix, err := retrieval.New(o)
	if err != nil {
		return err
	}
	s.search = &retrieval.Searcher{Index: ix}
	return s.engine.Register(s.search.Tool())
}
