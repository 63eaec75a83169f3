package office

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

// workerFlag is os.Args[1] of the binary re-executed as the worker.
const workerFlag = "--codumentor-office-worker"

// reply is the worker's answer on stdout: a document or an error.
type reply struct {
	Document *Document   `json:"document,omitempty"`
	Error    *replyError `json:"error,omitempty"`
}

type replyError struct {
	Limit   Limit  `json:"limit"`
	Message string `json:"message"`
}

// WorkerMain runs the office worker and exits when this process is one
// (Parser started it in its sandbox); everywhere else it returns at
// once. Call it right after sandboxkit.Main in main and in TestMain.
func WorkerMain() {
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		os.Exit(work(os.Args[2:]))
	}
}

// work parses the one input named in args (the parser's limits as JSON,
// then the path) and writes the reply.
func work(args []string) int {
	enc := json.NewEncoder(os.Stdout)
	enc.SetEscapeHTML(false)
	answer := func(r reply) int {
		if err := enc.Encode(r); err != nil {
			return 1
		}
		return 0
	}
	if len(args) != 2 || !filepath.IsAbs(args[1]) {
		fmt.Fprintf(os.Stderr, "office worker: want the limits and an absolute input path, got %q\n", args)
		return 2
	}
	var lim Limits
	if err := json.Unmarshal([]byte(args[0]), &lim); err != nil {
		fmt.Fprintf(os.Stderr, "office worker: bad limits: %v\n", err)
		return 2
	}
	// The sandbox's CPU time limit sends SIGXCPU first: say which limit
	// ended the parse (SIGKILL follows a second later).
	xcpu := make(chan os.Signal, 1)
	signal.Notify(xcpu, syscall.SIGXCPU)
	go func() {
		<-xcpu
		answer(reply{Error: &replyError{Limit: LimitCPUTime, Message: "the parser used up the sandbox's CPU time limit"}})
		os.Exit(0)
	}()
	doc, err := parseFile(context.Background(), args[1], lim)
	var ue *UnparseableError
	switch {
	case errors.As(err, &ue):
		return answer(reply{Error: &replyError{Limit: ue.Limit, Message: ue.Message}})
	case err != nil:
		fmt.Fprintln(os.Stderr, "office worker:", err)
		return 1
	}
	return answer(reply{Document: doc})
}
