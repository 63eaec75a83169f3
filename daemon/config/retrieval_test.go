package config

import (
	"strings"
	"testing"
)

func TestRetrievalConfig(t *testing.T) {
	for _, tc := range []struct {
		yaml, err string
	}{
		{"", ""},
		{"retrieval: {backend: embedded, max_file_bytes: 2048}", ""},
		{"llm: {base_url: http://127.0.0.1:1/v1}\nretrieval: {embeddings: {model: e5}}", ""},
		{"retrieval: {backend: weaviate, weaviate: {url: http://127.0.0.1:8080}}", ""},
		{"retrieval: {backend: elastic}", "retrieval.backend"},
		{"retrieval: {backend: weaviate}", "retrieval.weaviate.url"},
		{"retrieval: {backend: weaviate, weaviate: {url: 'ftp://x'}}", "retrieval.weaviate.url"},
		{"retrieval: {max_file_bytes: -1}", "retrieval.max_file_bytes"},
		{"retrieval: {max_files: 1000, max_repository_bytes: 1048576}", ""},
		{"retrieval: {max_files: -1}", "retrieval.max_files"},
		{"retrieval: {max_repository_bytes: -1}", "retrieval.max_repository_bytes"},
		{"retrieval: {embeddings: {model: e5}}", "llm.base_url"},
		{"retrieval: {embedings: {model: e5}}", "embedings"},
	} {
		_, err := Parse([]byte(tc.yaml))
		if tc.err == "" && err != nil {
			t.Errorf("%q: %v", tc.yaml, err)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%q: error %v, want one naming %s", tc.yaml, err, tc.err)
		}
	}
}
