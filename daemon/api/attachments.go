package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/office"
	"github.com/codumentor/codumentor/sandboxkit"
)

// Attachments serves a conversation's attachments. The uploaded file is
// parsed only by Parser (the office worker, in its sandbox): this
// package never opens it.
type Attachments struct {
	Store *store.Attachments
	// Parser reads an uploaded file; nil means the office plugin is
	// disabled, and uploads are refused.
	Parser interface {
		Parse(ctx context.Context, path string) (*office.Document, error)
	}
	// Dir holds uploads (0700) while the worker reads them; each is
	// removed once parsed.
	Dir string
	// MaxBytes caps an upload; Parallel caps parses at once.
	MaxBytes int64
	Parallel int

	once  sync.Once
	slots chan struct{}
}

var (
	errCompressedBody = &Error{Status: http.StatusUnsupportedMediaType, Code: "unsupported_encoding", Message: "request bodies are accepted without Content-Encoding only"}
	errOfficeDisabled = &Error{Status: http.StatusServiceUnavailable, Code: "office_disabled", Message: "attachments need the office plugin, which is not enabled on this server (plugins in config.yaml)"}
	errOfficeSandbox  = &Error{Status: http.StatusServiceUnavailable, Code: "sandbox_unavailable", Message: "attachments are parsed only in a sandbox, and the sandbox is unavailable on this server; nothing was parsed. An administrator sees why in GET /api/v1/admin/doctor"}
)

// errLaunchUnrecorded: the worker's launch could not be audited, so it
// did not start.
var errLaunchUnrecorded = &Error{Status: http.StatusServiceUnavailable, Code: "audit_unavailable", Message: "the sandbox's launch could not be recorded in the audit log, so nothing was run; the server log has the details"}

func (s *Server) uploadAttachment(c *fiber.Ctx) error {
	a := s.d.Attachments
	if a == nil || a.Parser == nil {
		return errOfficeDisabled
	}
	conv := conversation(c)
	ctx := audit.ForConversation(c.UserContext(), user(c).ID, conv.ID)
	path, name, size, sum, err := a.receive(c)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	a.once.Do(func() { a.slots = make(chan struct{}, max(1, a.Parallel)) })
	select {
	case a.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	doc, err := a.Parser.Parse(ctx, path)
	<-a.slots
	var ue *office.UnparseableError
	switch {
	case errors.As(err, &ue):
		s.log.Info("attachment refused", "conversation", conv.ID, "limit", ue.Limit, "reason", ue.Message)
		return apiError(http.StatusUnprocessableEntity, "unparseable", "the file cannot be read (limit: %s): %s", string(ue.Limit), ue.Message)
	case errors.Is(err, sandboxkit.ErrUnavailable):
		s.log.Error("an attachment was refused: the office worker's sandbox is unavailable (nothing is parsed outside it)", "err", err)
		return errOfficeSandbox
	case errors.Is(err, sandboxkit.ErrLaunchRefused):
		s.log.Error("an attachment was refused: the office worker's launch could not be recorded in the audit log (nothing was parsed)", "err", err)
		return errLaunchUnrecorded
	case err != nil:
		return err
	}
	at, err := a.Store.Add(ctx, conv.ID, name, size, doc, store.Upload{User: user(c).ID, Source: s.clientIP(c), SHA256: sum})
	if err != nil {
		return err
	}
	return c.Status(http.StatusCreated).JSON(at)
}

// receive copies the multipart field "file" of the request into a new
// file in Dir: its path, the client's name for it, its size and its
// SHA-256 (hex).
func (a *Attachments) receive(c *fiber.Ctx) (path, name string, size int64, sum string, err error) {
	mt, params, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType))
	if err != nil || mt != fiber.MIMEMultipartForm || params["boundary"] == "" {
		return "", "", 0, "", badRequest("send the file as multipart/form-data in the field \"file\"")
	}
	// The raw body as it arrives: readBody refused any Content-Encoding.
	mr := multipart.NewReader(uploadBody(c), params["boundary"])
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return "", "", 0, "", badRequest("the form has no field \"file\"")
		}
		if err != nil {
			return "", "", 0, "", badRequest("the multipart body is not valid: %v", err)
		}
		if part.FormName() != "file" {
			continue
		}
		f, err := os.CreateTemp(a.Dir, "upload-*")
		if err != nil {
			return "", "", 0, "", err
		}
		h := sha256.New()
		n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(part, a.MaxBytes+1))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil && n > a.MaxBytes {
			err = apiError(http.StatusRequestEntityTooLarge, "too_large", "the file is larger than the limit of %d bytes (office.max_bytes)", a.MaxBytes)
		}
		if err != nil {
			os.Remove(f.Name())
			var ae *Error
			if !errors.As(err, &ae) && !isOSError(err) {
				err = badRequest("the multipart body is not valid: %v", err)
			}
			return "", "", 0, "", err
		}
		return f.Name(), attachmentName(part.FileName()), n, hex.EncodeToString(h.Sum(nil)), nil
	}
}

func isOSError(err error) bool { _, ok := osAnswer(err); return ok }

// attachmentName is a printable name of at most 255 bytes for the
// client's file name.
func attachmentName(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	s = strings.TrimSpace(s)
	if len(s) > 255 {
		s = s[:255]
		s = strings.ToValidUTF8(s, "")
	}
	if s == "" {
		return "attachment"
	}
	return s
}

func (s *Server) listAttachments(c *fiber.Ctx) error {
	a := s.d.Attachments
	if a == nil {
		return c.JSON(fiber.Map{"attachments": []store.Attachment{}})
	}
	list, err := a.Store.List(c.UserContext(), conversation(c).ID)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"attachments": list})
}

// attachmentText is the text of an attachment as text/plain: one part
// (?part=N, from 1) or all of them, each under its title.
func (s *Server) attachmentText(c *fiber.Ctx) error {
	a := s.d.Attachments
	if a == nil {
		return errNotFound
	}
	_, parts, err := a.Store.Get(c.UserContext(), conversation(c).ID, c.Params("aid"))
	if errors.Is(err, store.ErrNotFound) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	var b strings.Builder
	if q := c.Query("part"); q != "" {
		n, err := strconv.Atoi(q)
		if err != nil || n < 1 || n > len(parts) {
			return badRequest("part must be a number from 1 to %d", len(parts))
		}
		b.WriteString(parts[n-1].Text)
	} else {
		for i, p := range parts {
			fmt.Fprintf(&b, "## %s\n\n%s\n", p.Title, p.Text)
			if i < len(parts)-1 {
				b.WriteByte('\n')
			}
		}
	}
	c.Set(fiber.HeaderContentType, fiber.MIMETextPlainCharsetUTF8)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	return c.SendString(b.String())
}
