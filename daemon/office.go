package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gorm.io/gorm"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/api"
	"github.com/codumentor/codumentor/daemon/config"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/office"
	"github.com/codumentor/codumentor/sandboxkit"
)

// openAttachments opens the attachments' table and the directory where
// uploads wait for the worker (left-overs of a stopped server are
// removed). Uploads are refused until the office plugin sets a Parser.
func openAttachments(db *gorm.DB, inst config.Instance, cfg config.Config) (*api.Attachments, error) {
	st, err := store.NewAttachments(db)
	if err != nil {
		return nil, err
	}
	// Absolute: the worker's sandbox binds the upload by its path.
	dir, err := filepath.Abs(filepath.Join(inst.Dir, "attachments"))
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	return &api.Attachments{Store: st, Dir: dir, MaxBytes: cfg.Office.MaxBytes, Parallel: cfg.Office.Parallel}, nil
}

// startOffice: uploads are parsed by the office worker in its sandbox,
// and the model reads them with read_attachment. An unavailable sandbox
// is logged; uploads then fail closed.
func startOffice(ctx context.Context, s *server, cfg config.Config) error {
	sl := officeLimits(cfg)
	p := &office.Parser{Bwrap: cfg.Sandbox.Bwrap, Seccomp: cfg.Sandbox.Seccomp, Timeout: cfg.Office.Timeout.Std(), Sandbox: &sl, Launching: launchRecorder(s.db, s.sandboxes)}
	s.attach.Parser = p
	if err := sandboxkit.Doctor(ctx, sandboxkit.DoctorOptions{Bwrap: cfg.Sandbox.Bwrap, Limits: &sl}).Err(); err != nil {
		s.log.Error("the office plugin is enabled but its sandbox is unavailable: attachments are refused until it is fixed (nothing is parsed outside it)", "err", sandboxkit.UnavailableDetail(err))
	}
	if _, err := exec.LookPath("pdftotext"); err != nil {
		s.log.Warn("pdftotext is not installed: PDF attachments cannot be read (Debian: apt-get install poppler-utils)")
	}
	return s.engine.Register(&readAttachment{store: s.attach.Store})
}

// officeLimits are the worker's own limits, in the server's delegated
// cgroup subtree, refused like every sandbox's when
// sandbox.require_limits cannot be met.
func officeLimits(cfg config.Config) sandboxkit.Limits {
	sl := office.WorkerLimits()
	server := cfg.Sandbox.SandboxLimits()
	sl.Cgroup, sl.CgroupParent, sl.Require = server.Cgroup, server.CgroupParent, server.Require
	return sl
}

// officeChecks: the worker's sandbox and pdftotext.
func officeChecks(ctx context.Context, s *server, cfg config.Config) []api.Check {
	c := api.Check{Name: "office/sandbox", OK: true, Detail: "attachments are parsed in the office worker's sandbox"}
	o := cfg.Sandbox.DoctorOptions("")
	o.Limits = new(officeLimits(cfg))
	if err := sandboxkit.Doctor(ctx, o).Err(); err != nil {
		c.OK, c.Detail = false, "attachments are refused: "+err.Error()
		var ue *sandboxkit.UnavailableError
		if errors.As(err, &ue) {
			// For administrators: what the check found, host paths included.
			c.Detail, c.Remedy = "attachments are refused: "+ue.Check.Name+": "+ue.Check.Detail, ue.Check.Remedy
		}
	}
	pdf := api.Check{Name: "office/pdftotext", OK: true, Detail: "PDF attachments are read by pdftotext"}
	if path, err := exec.LookPath("pdftotext"); err != nil {
		pdf.Detail, pdf.Remedy = "pdftotext is not installed: PDF attachments cannot be read", "install poppler-utils (Debian: apt-get install poppler-utils)"
	} else {
		pdf.Detail += " (" + path + ")"
	}
	return []api.Check{c, pdf}
}

// readAttachment is the read_attachment tool: the text of one part of
// an attachment of the call's conversation.
type readAttachment struct{ store *store.Attachments }

func (*readAttachment) Spec() agentcore.ToolSpec {
	return agentcore.ToolSpec{
		Name:        "read_attachment",
		Description: "Read a document the user attached to this conversation (spreadsheet, document, slides, PDF), one part at a time (a sheet, a slide, some pages). Without an id, lists the attachments and their parts.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"id":{"type":"string","description":"the attachment's id (att_…) or its file name; omit to list the attachments"},"part":{"type":"integer","minimum":1,"description":"the part to read, from 1 (default 1)"}},"additionalProperties":false}`),
	}
}

func (t *readAttachment) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	var args struct {
		ID   string `json:"id"`
		Part int    `json:"part"`
	}
	if err := c.Args(&args); err != nil {
		return "", err
	}
	if args.ID == "" {
		list, err := t.store.List(ctx, c.Conversation)
		if err != nil {
			return "", errors.New("the attachments cannot be listed right now")
		}
		if len(list) == 0 {
			return "This conversation has no attachments.", nil
		}
		var b strings.Builder
		for _, a := range list {
			fmt.Fprintf(&b, "%s %q (%s, %d parts)\n", a.ID, a.Name, a.Kind, len(a.Parts))
		}
		return b.String(), nil
	}
	at, parts, err := t.store.Find(ctx, c.Conversation, args.ID)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("no attachment %q in this conversation; call read_attachment without an id to list them", args.ID)
	}
	if err != nil {
		return "", errors.New("the attachment cannot be read right now")
	}
	if args.Part == 0 {
		args.Part = 1
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%q (%s) has no text.", at.Name, at.Kind), nil
	}
	if args.Part < 1 || args.Part > len(parts) {
		return "", fmt.Errorf("%q has parts 1 to %d", at.Name, len(parts))
	}
	p := parts[args.Part-1]
	return fmt.Sprintf("%q (%s), part %d of %d: %s\n\n%s", at.Name, at.Kind, args.Part, len(parts), p.Title, p.Text), nil
}
