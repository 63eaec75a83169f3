package office

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/headtail"
)

// Parser parses documents in the office worker's sandbox. The zero
// value is ready to use, with the defaults.
type Parser struct {
	// Sandbox are the settings of the worker's sandbox (WorkerPolicy):
	// its Launching is told of each worker's start before it runs; its
	// error refuses the parse.
	Sandbox sandboxkit.Settings
	// Worker bounds the worker's sandbox; nil means
	// WorkerLimitsUnder(Sandbox).
	Worker *sandboxkit.Limits
	// Limits bound the parser inside the worker (zero: DefaultLimits).
	Limits Limits
	// Timeout bounds one parse's wall-clock time (default 60s).
	Timeout time.Duration
}

// WorkerLimits are the office worker's sandbox limits: a few processes
// (the worker's threads, pdftotext), 512 MiB of memory and 4 GiB of
// address space (the Go runtime reserves far more than it uses), 20 s of CPU, 64 MiB files on a 128 MiB /tmp (excelize
// spills large sheets there), one core.
func WorkerLimits() sandboxkit.Limits {
	l := sandboxkit.Limits{
		Pids:         128,
		Memory:       512 << 20,
		CPU:          2,
		TmpSize:      128 << 20,
		HomeSize:     1 << 20,
		FileSize:     64 << 20,
		OpenFiles:    128,
		AddressSpace: 4 << 30,
		CPUTime:      20 * time.Second,
	}
	if raceEnabled {
		l.AddressSpace = 0
	}
	return l
}

// WorkerLimitsUnder are WorkerLimits in the cgroup subtree of s.Limits
// (its Cgroup), refused like every sandbox of s when they cannot be met
// (its Require).
func WorkerLimitsUnder(s sandboxkit.Settings) sandboxkit.Limits {
	l := WorkerLimits()
	if s.Limits != nil {
		l.Cgroup, l.CgroupParent, l.Require = s.Limits.Cgroup, s.Limits.CgroupParent, s.Limits.Require
	}
	return l
}

// workerLabel is the worker sandbox's label (Policy.Profile).
const workerLabel = "office"

// WorkerPolicy is the office worker's sandbox under s: the document at
// input (an absolute host path) read-only at /input/<base name>, the
// working directory, no workspace, no network, WorkerLimitsUnder(s).
func WorkerPolicy(s sandboxkit.Settings, input string) (*sandboxkit.Policy, error) {
	if !filepath.IsAbs(input) {
		return nil, fmt.Errorf("office: input %q must be an absolute path", input)
	}
	l := WorkerLimitsUnder(s)
	s.Limits = &l
	p, err := s.NewPolicy(workerLabel)
	if err != nil {
		return nil, err
	}
	p.ReadOnly = []sandboxkit.Bind{{Src: input, Dst: "/input/" + filepath.Base(input)}}
	p.Dir = "/input"
	return p, nil
}

// maxStderr is how much of the worker's stderr is kept, to tell a crash
// at the address-space limit from another.
const maxStderr = 8 << 10

// Parse reads the document at path (a host file the caller created; it
// is shown to the worker read-only) in a fresh worker sandbox. Errors:
// an *UnparseableError (errors.Is ErrUnparseable) for a document the
// worker refused or died on; an error wrapping sandboxkit.ErrUnavailable
// when the sandbox cannot be provided (nothing was parsed); others for
// failures of the machinery.
func (p *Parser) Parse(ctx context.Context, path string) (*Document, error) {
	lim := p.Limits.withDefaults()
	pol, err := WorkerPolicy(p.Sandbox, path)
	if err != nil {
		return nil, err
	}
	if p.Worker != nil {
		pol.Limits = *p.Worker
	}
	sl := pol.Limits
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	limJSON, err := json.Marshal(lim)
	if err != nil {
		return nil, err
	}
	var stdout bytes.Buffer
	stderr := headtail.New(maxStderr, 0)
	c := sandboxkit.SelfCommand(ctx, pol, workerFlag, string(limJSON), pol.ReadOnly[0].Dst)
	// A short-lived process: collect garbage less often, and harder
	// near the memory limit.
	c.Env = []string{"GOMAXPROCS=2", "GOTRACEBACK=single", "GOGC=200", fmt.Sprintf("GOMEMLIMIT=%dMiB", max(sl.Memory*3/4, 64<<20)>>20)}
	c.Stdout, c.Stderr = &stdout, stderr
	// JSON escapes at most double clean text; the rest is titles.
	c.OutputLimit = int64(2*lim.MaxText + 1<<20)
	c.Timeout = timeout
	err = c.Run()
	if err != nil {
		return nil, p.workerFailed(ctx, c, err, stderr.String(), sl)
	}
	if c.State.Truncated {
		return nil, refuse(LimitOutput, "the worker's output went beyond its limit of %d bytes", c.OutputLimit)
	}
	return decodeReply(stdout.Bytes(), lim)
}

// workerFailed names why the worker did not answer.
func (p *Parser) workerFailed(ctx context.Context, c *sandboxkit.Cmd, err error, stderr string, sl sandboxkit.Limits) error {
	var setup *sandboxkit.SetupError
	var exit *sandboxkit.ExitError
	switch {
	case errors.Is(err, sandboxkit.ErrUnavailable), errors.As(err, &setup):
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case c.State == nil:
		return err
	case c.State.Truncated:
		return refuse(LimitOutput, "the worker's output went beyond its limit of %d bytes", c.OutputLimit)
	case c.State.Limit == "memory":
		return refuse(LimitMemory, "the worker was killed at the sandbox's memory limit (%d MiB)", sl.Memory>>20)
	case c.State.Limit == "pids":
		return refuse(LimitProcesses, "the worker hit the sandbox's process limit (%d)", sl.Pids)
	case errors.Is(err, context.DeadlineExceeded):
		return refuse(LimitTimeout, "the worker did not finish within %s", c.Timeout)
	case strings.Contains(stderr, "pthread_create failed") || strings.Contains(stderr, "newosproc"):
		return refuse(LimitProcesses, "the worker could not start a thread: the sandbox's process limit (%d) or address space (%d MiB) is used up", sl.Pids, sl.AddressSpace>>20)
	case strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory"):
		return refuse(LimitMemory, "the worker ran out of memory at the sandbox's address-space limit (%d MiB)", sl.AddressSpace>>20)
	case errors.As(err, &exit) && (exit.Code == 128+24 || exit.Code == 128+9 && sl.CPUTime > 0 && c.State.Duration >= sl.CPUTime):
		return refuse(LimitCPUTime, "the worker was stopped at the sandbox's CPU time limit (%s)", sl.CPUTime)
	case errors.As(err, &exit) && exit.Code == 128+25:
		return refuse(LimitPartSize, "the worker was stopped at the sandbox's file size limit (%d MiB)", sl.FileSize>>20)
	case errors.As(err, &exit):
		return refuse(LimitWorkerCrash, "the worker failed (exit %d): %s", exit.Code, clip(firstLine(stderr)))
	}
	return fmt.Errorf("office: the worker: %w", err)
}

// knownLimits are the limits a worker may name.
var knownLimits = []Limit{LimitEmpty, LimitKind, LimitCorrupt, LimitEntries, LimitEntryName, LimitPartSize, LimitUnzipSize, LimitNesting, LimitDTD, LimitSheets, LimitSlides, LimitMemory, LimitCPUTime, LimitTimeout, LimitOutput, LimitProcesses, LimitWorkerCrash}

// decodeReply checks the worker's answer as untrusted data: a worker
// that was taken over by its input may say anything.
func decodeReply(out []byte, lim Limits) (*Document, error) {
	var r reply
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, refuse(LimitWorkerCrash, "the worker's answer is not valid: %v", err)
	}
	if e := r.Error; e != nil {
		if !slices.Contains(knownLimits, e.Limit) {
			return nil, refuse(LimitWorkerCrash, "the worker named an unknown limit")
		}
		msg := clean(e.Message)
		if len(msg) > 1024 {
			msg = truncateUTF8(msg, 1024) + "…"
		}
		return nil, &UnparseableError{Limit: e.Limit, Message: msg}
	}
	d := r.Document
	if d == nil {
		return nil, refuse(LimitWorkerCrash, "the worker answered neither a document nor an error")
	}
	if !slices.Contains([]string{KindXLSX, KindDOCX, KindPPTX, KindPDF}, d.Kind) {
		return nil, refuse(LimitWorkerCrash, "the worker answered an unknown kind")
	}
	total := 0
	for i := range d.Parts {
		pt := &d.Parts[i]
		if !utf8.ValidString(pt.Text) || !utf8.ValidString(pt.Title) || len(pt.Text) > lim.PartBytes || len(pt.Title) > 1024 {
			return nil, refuse(LimitWorkerCrash, "the worker answered a part beyond its limits")
		}
		total += len(pt.Text)
	}
	if total > lim.MaxText {
		return nil, refuse(LimitWorkerCrash, "the worker answered more text than its limit")
	}
	if d.Parts == nil {
		d.Parts = []Part{}
	}
	return d, nil
}
