package daemon_test

import (
	"net/http"
	"testing"

	"github.com/codumentor/codumentor/agentcore/llmtest"
)

// TestModelProfileKeyStaysWithItsEndpoint: a profile replaced without
// api_key keeps its key only for the same endpoint. Pointed at another
// allowed endpoint, the key would go where its owner never sent it (a
// stolen session could aim it at an endpoint whose requests it sees):
// the new endpoint needs the key again.
func TestModelProfileKeyStaysWithItsEndpoint(t *testing.T) {
	const key = "sk-profile-CANARY-0f9a"
	var eps []string
	for range 2 {
		s, err := llmtest.StartServer(&llmtest.Script{Steps: []llmtest.Step{{Text: "hi"}}}, llmtest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		eps = append(eps, s.URL())
	}
	in := newInstance(t, "plugins: []\nllm:\n  allowed_endpoints: ["+eps[0]+", "+eps[1]+"]\n")
	in.addUser("alice", pw, false)
	a := in.start().login("alice", pw)

	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": eps[0], "model": "m", "api_key": key}, nil)
	// Same endpoint: the key stays.
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": eps[0], "model": "m2"}, nil)
	// Another endpoint without the key: refused, nothing changes.
	status, res, _ := a.do("PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": eps[1], "model": "m3"})
	if status != http.StatusBadRequest || apiErrorCode(t, res) != "bad_request" {
		t.Fatalf("PUT to another endpoint without api_key: %d %s", status, res)
	}
	var got modelProfile
	a.must(http.StatusOK, "GET", "/api/v1/model-profiles/work", nil, &got)
	if got.Endpoint != eps[0] || got.Model != "m2" || !got.HasAPIKey {
		t.Fatalf("after the refused PUT: %+v", got)
	}
	// With the key, it moves.
	a.must(http.StatusOK, "PUT", "/api/v1/model-profiles/work", map[string]string{"endpoint": eps[1], "model": "m3", "api_key": key}, &got)
	if got.Endpoint != eps[1] || !got.HasAPIKey {
		t.Fatalf("PUT to another endpoint with api_key: %+v", got)
	}
}
