package weaviatetest

import (
	"net/http"
	"testing"
)

func TestStart(t *testing.T) {
	s := Start(t)
	resp, err := http.Get(s.URL + "/v1/meta")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/meta: %s", resp.Status)
	}
}
