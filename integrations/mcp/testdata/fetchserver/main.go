// Command fetchserver is an MCP stdio server for tests: its one tool,
// fetch, GETs a URL through the proxy its environment names (HTTP_PROXY,
// HTTPS_PROXY; none: directly) and says what came back. FETCHSERVER_CA,
// if set, is the PEM of the CA its HTTPS servers' certificates come
// from.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	// No connection is kept: each fetch is one attempt, over when the
	// call returns.
	tr := &http.Transport{Proxy: http.ProxyFromEnvironment, DisableKeepAlives: true}
	if ca := os.Getenv("FETCHSERVER_CA"); ca != "" {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(ca))
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
	}
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	s := sdk.NewServer(&sdk.Implementation{Name: "fetchserver", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "fetch", Description: "GET a URL and report the status, the body's size and its start"}, func(ctx context.Context, _ *sdk.CallToolRequest, in struct {
		URL string `json:"url"`
	}) (*sdk.CallToolResult, any, error) {
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fetch(ctx, client, in.URL)}}}, nil, nil
	})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}

func fetch(ctx context.Context, c *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "fetch failed: " + err.Error()
	}
	resp, err := c.Do(req)
	if err != nil {
		return "fetch failed: " + err.Error()
	}
	defer resp.Body.Close()
	head := make([]byte, 64)
	n, err := io.ReadFull(resp.Body, head)
	rest, err2 := io.Copy(io.Discard, resp.Body)
	total := int64(n) + rest
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil
	}
	if err == nil {
		err = err2
	}
	if err != nil {
		return fmt.Sprintf("fetch failed after %d bytes: %v", total, err)
	}
	return fmt.Sprintf("status %d, %d bytes: %s", resp.StatusCode, total, head[:n])
}
