package daemon

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"

	"gorm.io/gorm"

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
	sl := office.WorkerLimitsUnder(s.sandbox)
	p := &office.Parser{Sandbox: s.sandbox, Timeout: cfg.Office.Timeout.Std()}
	s.attach.Parser = p
	if err := sandboxkit.Doctor(ctx, sandboxkit.DoctorOptions{Bwrap: cfg.Sandbox.Bwrap, Limits: &sl}).Err(); err != nil {
		s.log.Error("the office plugin is enabled but its sandbox is unavailable: attachments are refused until it is fixed (nothing is parsed outside it)", "err", sandboxkit.UnavailableDetail(err))
	}
	if _, err := exec.LookPath("pdftotext"); err != nil {
		s.log.Warn("pdftotext is not installed: PDF attachments cannot be read (Debian: apt-get install poppler-utils)")
	}
	return s.engine.Register(office.ReadTool{Store: attachmentStore{s.attach.Store}})
}

// officeChecks: the worker's sandbox and pdftotext.
func officeChecks(ctx context.Context, s *server, cfg config.Config) []api.Check {
	c := api.Check{Name: "office/sandbox", OK: true, Detail: "attachments are parsed in the office worker's sandbox"}
	o := cfg.Sandbox.DoctorOptions("")
	o.Limits = new(office.WorkerLimitsUnder(cfg.Sandbox.Settings()))
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

// attachmentStore is the attachments' table as office.ReadTool reads it.
type attachmentStore struct{ st *store.Attachments }

func (a attachmentStore) List(ctx context.Context, conversation string) ([]office.Attachment, error) {
	list, err := a.st.List(ctx, conversation)
	if err != nil {
		return nil, err
	}
	out := make([]office.Attachment, len(list))
	for i, at := range list {
		out[i] = officeAttachment(at)
	}
	return out, nil
}

// Find's not-found error is store.ErrNotFound, which wraps
// agentcore.ErrNotFound.
func (a attachmentStore) Find(ctx context.Context, conversation, idOrName string) (office.Attachment, []office.Part, error) {
	at, parts, err := a.st.Find(ctx, conversation, idOrName)
	if err != nil {
		return office.Attachment{}, nil, err
	}
	return officeAttachment(at), parts, nil
}

func officeAttachment(at store.Attachment) office.Attachment {
	return office.Attachment{ID: at.ID, Name: at.Name, Kind: at.Kind, Parts: len(at.Parts)}
}
