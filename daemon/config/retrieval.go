package config

import (
	"errors"
	"fmt"
	"net/url"
)

// Retrieval configures code search (the retrieval: section).
type Retrieval struct {
	// Backend is where chunks are indexed: embedded (the default, also
	// when empty: SQLite FTS5 in the instance database, no server) or
	// weaviate.
	Backend string `yaml:"backend"`
	// MaxFileBytes skips larger files at ingestion (0: 1 MiB).
	MaxFileBytes int64 `yaml:"max_file_bytes"`
	// MaxFiles caps the files of a commit a sync indexes (0: 200,000);
	// a commit with more fails its sync with too_many_entries.
	MaxFiles int `yaml:"max_files"`
	// MaxRepositoryBytes caps the bytes of the files one sync indexes
	// (0: 4 GiB); more fail the sync with too_many_entries.
	MaxRepositoryBytes int64 `yaml:"max_repository_bytes"`
	// Embeddings, when its model is set, embeds chunks and queries with
	// that model on the LLM endpoint's /v1/embeddings (llm.base_url):
	// searches are then hybrid (BM25 and vectors, fused).
	Embeddings Embeddings `yaml:"embeddings"`
	// Weaviate is the server of backend: weaviate.
	Weaviate Weaviate `yaml:"weaviate"`
}

// Embeddings names the embedding model.
type Embeddings struct {
	Model string `yaml:"model"`
}

// Weaviate is a Weaviate server.
type Weaviate struct {
	// URL, e.g. http://127.0.0.1:8080.
	URL string `yaml:"url"`
	// APIKey, if the server wants one.
	APIKey string `yaml:"api_key"`
	// Class is the collection's name (default CodumentorChunk).
	Class string `yaml:"class"`
}

// Retrieval backends.
const (
	RetrievalEmbedded = "embedded"
	RetrievalWeaviate = "weaviate"
)

func (r Retrieval) validate(llmBaseURL string) []error {
	var errs []error
	switch r.Backend {
	case "", RetrievalEmbedded:
	case RetrievalWeaviate:
		u, err := url.Parse(r.Weaviate.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("retrieval.weaviate.url: %q is not an http(s) URL like http://127.0.0.1:8080", r.Weaviate.URL))
		}
	default:
		errs = append(errs, fmt.Errorf("retrieval.backend: %q is not embedded or weaviate", r.Backend))
	}
	if r.MaxFileBytes < 0 {
		errs = append(errs, errors.New("retrieval.max_file_bytes must be positive (or 0 for the default, 1 MiB)"))
	}
	if r.MaxFiles < 0 {
		errs = append(errs, errors.New("retrieval.max_files must be positive (or 0 for the default, 200000)"))
	}
	if r.MaxRepositoryBytes < 0 {
		errs = append(errs, errors.New("retrieval.max_repository_bytes must be positive (or 0 for the default, 4 GiB)"))
	}
	if r.Embeddings.Model != "" && llmBaseURL == "" {
		errs = append(errs, errors.New("retrieval.embeddings.model needs llm.base_url: embeddings come from the LLM endpoint's /v1/embeddings"))
	}
	return errs
}
