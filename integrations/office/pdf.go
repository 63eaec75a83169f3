package office

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"

	"github.com/codumentor/codumentor/sandboxkit/headtail"
)

// parsePDF runs pdftotext (poppler-utils) on the file, inside the same
// sandbox as the rest of the worker, and groups the pages (form feeds
// in its output) into parts.
func parsePDF(ctx context.Context, path string, b *builder) error {
	bin, err := exec.LookPath("pdftotext")
	if err != nil {
		return errors.New("office: pdftotext is not installed (Debian: apt-get install poppler-utils); PDFs cannot be read")
	}
	cmd := exec.CommandContext(ctx, bin, "-q", "-enc", "UTF-8", path, "-")
	stderr := headtail.New(4096, 0)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return errf("pdftotext: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return errf("pdftotext: %w", err)
	}
	text, rerr := io.ReadAll(io.LimitReader(out, int64(b.lim.MaxText)+1))
	if len(text) > b.lim.MaxText {
		cmd.Process.Kill()
	}
	werr := cmd.Wait()
	if rerr != nil {
		return errf("pdftotext output: %w", rerr)
	}
	if werr != nil && len(text) <= b.lim.MaxText {
		var ee *exec.ExitError
		if errors.As(werr, &ee) && ee.ExitCode() >= 0 {
			return refuse(LimitCorrupt, "pdftotext cannot read the PDF (exit %d): %s", ee.ExitCode(), clip(firstLine(stderr.String())))
		}
		return signalled(werr, "pdftotext")
	}
	pages := strings.Split(string(text), "\f")
	if n := len(pages); n > 0 && strings.TrimSpace(pages[n-1]) == "" {
		pages = pages[:n-1]
	}
	first, cur := 1, strings.Builder{}
	emit := func(last int) {
		title := fmt.Sprintf("Page %d", first)
		if last > first {
			title = fmt.Sprintf("Pages %d-%d", first, last)
		}
		b.add(title, cur.String())
		cur.Reset()
		first = last + 1
	}
	for i, pg := range pages {
		if cur.Len() > 0 && cur.Len()+len(pg) > b.lim.PartBytes {
			emit(i)
		}
		cur.WriteString(pg)
		cur.WriteString("\n")
	}
	if cur.Len() > 0 {
		emit(len(pages))
	}
	return nil
}

// signalled names the limit behind a helper killed by a signal.
func signalled(err error, what string) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		switch ee.String() {
		case "signal: CPU time limit exceeded", "signal: killed":
			return refuse(LimitCPUTime, "%s was stopped at the sandbox's CPU time limit", what)
		case "signal: file size limit exceeded":
			return refuse(LimitPartSize, "%s was stopped at the sandbox's file size limit", what)
		}
	}
	return refuse(LimitWorkerCrash, "%s failed: %v", what, err)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
