package office

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codumentor/codumentor/integrations/office/officetest"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/sandboxtest"
)

// requireSandbox skips (or, under CI, fails) a test that needs the
// worker's sandbox.
func requireSandbox(t testing.TB) {
	t.Helper()
	sandboxtest.RequireSandbox(t, func(ctx context.Context) error { return sandboxkit.Doctor(ctx, sandboxkit.DoctorOptions{}).Err() })
}

func write(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// goodCases are the good documents, uploaded under misleading names:
// the kind comes from the content.
var goodCases = []struct {
	name, kind string
	data       func() []byte
	want       []string // in this order, across the parts
	titles     []string
}{
	{"budget.docx", KindXLSX, officetest.GoodXLSX, []string{"Item\tCost", "Servers\t1200", "Total\t3500", "Approved by finance"}, []string{"Sheet Budget", "Sheet Notes"}},
	{"report.bin", KindDOCX, officetest.GoodDOCX, []string{"# Quarterly report", "Revenue grew by 12 percent", "# Sales by region", "| Region | Sales |", "| North | 1200 |", "## Outlook", "steady growth & fewer returns"}, []string{"Quarterly report", "Sales by region", "Outlook"}},
	{"deck.pdf", KindPPTX, officetest.GoodPPTX, []string{"Roadmap 2027", "Milestones", "Ship the office worker", "Notes:\nMention the sandbox limits.", "Questions?"}, []string{"Slide 1", "Slide 2", "Slide 3"}},
	{"review.xlsx", KindPDF, officetest.GoodPDF, []string{"Incident review", "14 minutes", "Action items", "second DNS resolver"}, []string{"Pages 1-2"}},
}

func checkDoc(t *testing.T, d *Document, kind string, want, titles []string) {
	t.Helper()
	if d.Kind != kind {
		t.Fatalf("kind %q, want %q", d.Kind, kind)
	}
	var all strings.Builder
	var got []string
	for _, p := range d.Parts {
		all.WriteString(p.Text)
		got = append(got, p.Title)
	}
	text := all.String()
	at := 0
	for _, w := range want {
		i := strings.Index(text[at:], w)
		if i < 0 {
			t.Fatalf("%q not found (in order) in %q", w, text)
		}
		at += i + len(w)
	}
	if strings.Join(got, "|") != strings.Join(titles, "|") {
		t.Errorf("titles %q, want %q", got, titles)
	}
}

// TestParseInProcess checks the parser itself (what the worker runs).
func TestParseInProcess(t *testing.T) {
	for _, c := range goodCases {
		t.Run(c.kind, func(t *testing.T) {
			if c.kind == KindPDF {
				if _, err := os.Stat("/usr/bin/pdftotext"); err != nil {
					sandboxtest.SkipOrFail(t, "pdftotext is not installed (poppler-utils)")
				}
			}
			d, err := parseFile(t.Context(), write(t, c.name, c.data()), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			checkDoc(t, d, c.kind, c.want, c.titles)
		})
	}
}

// TestParseInWorker parses each kind through the sandboxed worker.
func TestParseInWorker(t *testing.T) {
	requireSandbox(t)
	p := &Parser{}
	for _, c := range goodCases {
		t.Run(c.kind, func(t *testing.T) {
			d, err := p.Parse(t.Context(), write(t, c.name, c.data()))
			if err != nil {
				t.Fatal(err)
			}
			checkDoc(t, d, c.kind, c.want, c.titles)
		})
	}
}

// TestHostile: every hostile document is refused by the parser with the
// limit its generator names.
func TestHostile(t *testing.T) {
	for _, h := range officetest.Hostile() {
		t.Run(h.Name, func(t *testing.T) {
			_, err := parseFile(t.Context(), write(t, h.Name, h.Data()), Limits{})
			var ue *UnparseableError
			if !errors.As(err, &ue) || string(ue.Limit) != h.Limit {
				t.Fatalf("got %v, want an UnparseableError naming %s", err, h.Limit)
			}
		})
	}
}

// TestHostileInWorker: hostile documents are refused through the worker
// too, and nothing is written beside them. (daemon's
// TestAttachmentsHostile sends every one through the server's worker.)
func TestHostileInWorker(t *testing.T) {
	requireSandbox(t)
	p := &Parser{}
	for _, h := range officetest.Hostile() {
		if h.Name != "flat-bomb.docx" && h.Name != "billion-laughs.docx" && h.Name != "elf.docx" {
			continue
		}
		t.Run(h.Name, func(t *testing.T) {
			path := write(t, h.Name, h.Data())
			snap := sandboxtest.Take(t, filepath.Dir(path))
			_, err := p.Parse(t.Context(), path)
			var ue *UnparseableError
			if !errors.As(err, &ue) || string(ue.Limit) != h.Limit || !errors.Is(err, ErrUnparseable) {
				t.Fatalf("got %v, want an UnparseableError naming %s", err, h.Limit)
			}
			snap.Unchanged(t, filepath.Dir(path))
		})
	}
}

// TestWorkerLimits: a worker that works too long is stopped at the
// sandbox's limits, and the error names them.
func TestWorkerLimits(t *testing.T) {
	requireSandbox(t)
	path := write(t, "slow.docx", officetest.SlowDOCX())
	cases := []struct {
		name  string
		lim   func(*sandboxkit.Limits)
		limit Limit
	}{
		{"cpu", func(l *sandboxkit.Limits) { l.CPUTime = time.Second }, LimitCPUTime},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sl := WorkerLimits()
			c.lim(&sl)
			_, err := (&Parser{Worker: &sl}).Parse(t.Context(), path)
			var ue *UnparseableError
			if !errors.As(err, &ue) || ue.Limit != c.limit {
				t.Fatalf("got %v, want %s", err, c.limit)
			}
		})
	}
}

// TestFailClosed: without bwrap nothing is parsed, and the error says the
// sandbox is unavailable.
func TestFailClosed(t *testing.T) {
	_, err := (&Parser{Sandbox: sandboxkit.Settings{Bwrap: "/nonexistent/bwrap"}}).Parse(t.Context(), write(t, "r.docx", officetest.GoodDOCX()))
	if !errors.Is(err, sandboxkit.ErrUnavailable) {
		t.Fatalf("got %v, want ErrUnavailable", err)
	}
}

// TestDecodeReply: the worker's answer is checked like any input.
func TestDecodeReply(t *testing.T) {
	lim := DefaultLimits()
	big := strings.Repeat("x", lim.PartBytes+1)
	for _, c := range []struct{ name, out string }{
		{"not json", "hello"},
		{"unknown limit", `{"error":{"limit":"../etc","message":"x"}}`},
		{"unknown kind", `{"document":{"kind":"exe","parts":[]}}`},
		{"part too big", `{"document":{"kind":"docx","parts":[{"title":"t","text":"` + big + `"}]}}`},
		{"extra field", `{"document":{"kind":"docx","parts":[]},"path":"/etc/passwd"}`},
		{"nothing", `{}`},
	} {
		_, err := decodeReply([]byte(c.out), lim)
		var ue *UnparseableError
		if !errors.As(err, &ue) || ue.Limit != LimitWorkerCrash {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	d, err := decodeReply([]byte(`{"error":{"limit":"dtd","message":"bad\u0007 thing"}}`), lim)
	var ue *UnparseableError
	if d != nil || !errors.As(err, &ue) || ue.Limit != LimitDTD || ue.Message != "bad thing" {
		t.Errorf("error reply: %v %v", d, err)
	}
}

// TestParseConcurrent: hostile documents in parallel with good ones; the
// good ones keep being answered.
func TestParseConcurrent(t *testing.T) {
	requireSandbox(t)
	p := &Parser{}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	good := write(t, "g.docx", officetest.GoodDOCX())
	bomb := write(t, "b.docx", officetest.FailBillionLaughs())
	var ok atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			path := good
			if i%2 == 1 {
				path = bomb
			}
			_, err := p.Parse(ctx, path)
			if (err == nil) != (path == good) {
				t.Errorf("%s: %v", path, err)
			}
			if err == nil {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	if ok.Load() != 2 {
		t.Errorf("%d good documents parsed, want 2", ok.Load())
	}
}
