package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The runner serves the demo transcript until its context ends. (Run it
// by name: ./... skips testdata directories.)
func TestRun(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0", "-script", "../transcripts/demo.json"}, pw)
		pw.Close()
	}()
	url, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url = strings.TrimSpace(url)
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/v1") {
		t.Fatalf("printed %q, want the base URL", url)
	}
	resp, err := http.Post(url+"/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "echo hello from the sandbox") {
		t.Errorf("%d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
	if err := run(t.Context(), []string{"-script", "missing.json"}, io.Discard); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing script: %v", err)
	}
}
