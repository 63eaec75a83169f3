package llm_test

import (
	"testing"

	"github.com/codumentor/codumentor/integrations/llm"
)

// Endpoint, which usage records keep and admins see, is the base URL
// without credentials or a trailing slash; Model is the configured one.
func TestEndpointNamesNoCredentials(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:8000/v1/":              "http://127.0.0.1:8000/v1",
		"https://user:hunter2@models.example/v1": "https://models.example/v1",
		"https://token@models.example":           "https://models.example",
	} {
		c, err := llm.New(llm.Config{BaseURL: in, Model: "qwen"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Endpoint() != want || c.Model() != "qwen" {
			t.Errorf("%s: Endpoint %q, Model %q; want %q, qwen", in, c.Endpoint(), c.Model(), want)
		}
	}
}
