// Command llmserver serves a scripted transcript as an OpenAI-compatible
// endpoint, so a person can try Codumentor without a real model:
//
//	go run ./testdata/llmserver -listen 127.0.0.1:8081 -script testdata/transcripts/demo.json
//
// It prints the base URL to configure as llm.base_url and serves until
// interrupted. See agentcore/llmtest for how a request picks its reply.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/codumentor/codumentor/agentcore/llmtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "llmserver:", err)
		os.Exit(2)
	}
}

// run serves until ctx ends; it prints the base URL on out once listening.
func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("llmserver", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8081", "address to listen on")
	script := fs.String("script", "testdata/transcripts/demo.json", "transcript to play (JSON: {\"steps\": [...]})")
	model := fs.String("model", "llmtest", "model name to report")
	apiKey := fs.String("api-key", "", "API key clients must send (default: none checked)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := llmtest.LoadScript(*script)
	if err != nil {
		return err
	}
	srv, err := llmtest.StartServer(s, llmtest.Options{Addr: *listen, Model: *model, APIKey: *apiKey})
	if err != nil {
		return err
	}
	defer srv.Close()
	fmt.Fprintln(out, srv.URL())
	<-ctx.Done()
	return nil
}
