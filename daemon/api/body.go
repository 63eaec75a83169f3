package api

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Request bodies. The server streams every body (fasthttp's
// StreamRequestBody, multipart forms not pre-parsed): nothing of a body
// but fasthttp's first 8 KiB is read before readBody, which runs before
// routing and authentication. readBody refuses a declared length over the
// route's limit unread, and reads the body of every route but the upload
// into memory, up to defaultBodyLimit, charging each buffer it allocates
// to the server's budget (Limits.MaxBodyBytes): past it a request
// answers 503 busy. The upload alone is left streaming, for its handler
// to copy to disk once the request is authenticated (uploadBody).
//
// A connection whose body was not read to its end is closed after the
// answer: fasthttp would take the unread bytes for the next request.

const (
	// defaultBodyLimit caps the body of every request but an upload.
	defaultBodyLimit = 2 << 20
	// bodyChunk is the first buffer of a body read into memory, and what
	// a streamed upload is charged (its read buffers).
	bodyChunk = 64 << 10
	// defaultMaxBodyBytes is Limits.MaxBodyBytes' default.
	defaultMaxBodyBytes = 32 << 20
)

// uploadLimitWhat names the upload's limit in its 413.
const uploadLimitWhat = " (office.max_bytes and 1 MiB for the form)"

var errBodyBusy = &Error{Status: http.StatusServiceUnavailable, Code: "busy", Message: "the server is receiving too many request bodies at once; try again in a moment"}

func errBodyTooLarge(limit int64, what string) *Error {
	return apiError(http.StatusRequestEntityTooLarge, "too_large", "the request body is larger than the limit of %d bytes%s", limit, what)
}

func errBodyUnread(err error) *Error {
	return apiError(http.StatusBadRequest, "bad_request", "the request body could not be read (it ended early or arrived too slowly): %v", err)
}

// bodyLimit is fasthttp's body limit: in streaming mode it only decides
// how much fasthttp reads ahead (at most 8 KiB); readBody enforces each
// route's limit.
func (d Deps) bodyLimit() int {
	return int(max(d.uploadLimit(), defaultBodyLimit))
}

// uploadLimit is the largest body of an upload: the file and 1 MiB of
// form around it; 0 without the office plugin.
func (d Deps) uploadLimit() int64 {
	if a := d.Attachments; a != nil {
		return a.MaxBytes + 1<<20
	}
	return 0
}

// isUpload reports whether the request is an attachment upload, whose
// body its handler streams. It matches the route as Fiber does (case
// and a trailing slash do not matter); a path it misses gets the
// default limit, which fails closed.
func isUpload(c *fiber.Ctx) bool {
	if c.Method() != fiber.MethodPost {
		return false
	}
	// Only a multipart form streams: authenticateCookie reads a
	// urlencoded form's CSRF field from the body in memory.
	if mt, _, err := mime.ParseMediaType(c.Get(fiber.HeaderContentType)); err != nil || mt != fiber.MIMEMultipartForm {
		return false
	}
	seg := strings.Split(strings.TrimSuffix(c.Path(), "/"), "/")
	return len(seg) == 6 && seg[0] == "" && strings.EqualFold(seg[1], "api") && strings.EqualFold(seg[2], "v1") &&
		strings.EqualFold(seg[3], "conversations") && seg[4] != "" && strings.EqualFold(seg[5], "attachments")
}

// readBody holds each request's body to its route's limit and the
// server's budget; see the comment at the top of this file.
func (s *Server) readBody(c *fiber.Ctx) error {
	req := c.Request()
	declared := int64(req.Header.ContentLength()) // -1 chunked, -2 none
	if enc := strings.TrimSpace(string(req.Header.Peek(fiber.HeaderContentEncoding))); enc != "" && !strings.EqualFold(enc, "identity") {
		// Fiber's c.Body() would inflate it in memory without a bound
		// (a 2 MiB gzip body of zeros is 2 GiB).
		// Drained, a client still writing it reads the answer instead of
		// a reset; closed all the same, since fasthttp does not take a
		// streamed body's connection back for the next request.
		drainSmall(c, declared)
		c.Context().SetConnectionClose()
		return errCompressedBody
	}
	if limit := s.d.uploadLimit(); limit > 0 && isUpload(c) {
		if declared > limit {
			c.Context().SetConnectionClose()
			return errBodyTooLarge(limit, uploadLimitWhat)
		}
		if !s.bodies.TryAcquire(bodyChunk) {
			c.Context().SetConnectionClose()
			c.Set(fiber.HeaderRetryAfter, "1")
			return errBodyBusy
		}
		defer s.bodies.Release(bodyChunk)
		body := &streamBody{r: c.Context().RequestBodyStream(), left: limit, limit: limit}
		c.Locals(localBody, body)
		err := c.Next()
		if !body.eof {
			c.Context().SetConnectionClose()
		}
		return err
	}
	if declared > defaultBodyLimit {
		c.Context().SetConnectionClose()
		return errBodyTooLarge(defaultBodyLimit, "")
	}
	body, held, err := s.readAll(c.Context().RequestBodyStream(), declared, defaultBodyLimit)
	defer s.bodies.Release(held)
	if err != nil {
		c.Context().SetConnectionClose()
		if err == errBodyBusy {
			c.Set(fiber.HeaderRetryAfter, "1")
		}
		return err
	}
	req.SetBodyRaw(body)
	return c.Next()
}

// drainSmall reads and drops a refused body of a declared length of at
// most bodyChunk, and reports whether it did: a client still writing the
// body is then not reset before it reads the answer (net/http drains
// small bodies for the same reason).
func drainSmall(c *fiber.Ctx, declared int64) bool {
	if declared < 0 || declared > bodyChunk {
		return false
	}
	r := c.Context().RequestBodyStream()
	if r == nil || declared == 0 {
		return true
	}
	_, err := io.CopyN(io.Discard, r, declared)
	return err == nil
}

// readAll reads a body of n bytes (-1: unknown, -2: none) of at most
// limit bytes from r into memory. Each buffer it allocates is charged to
// the budget first; held is what to release once the request is
// answered, also on error.
func (s *Server) readAll(r io.Reader, n, limit int64) (body []byte, held int64, err error) {
	if r == nil || n == 0 || n == -2 {
		return nil, 0, nil
	}
	want := limit + 1 // of a body of unknown length: a byte past the limit tells
	if n > 0 {
		want = n
	}
	var buf []byte
	for int64(len(buf)) < want {
		if len(buf) == cap(buf) {
			size := min(max(2*int64(cap(buf)), bodyChunk), want)
			if !s.bodies.TryAcquire(size) {
				return nil, held, errBodyBusy
			}
			held += size
			buf = append(make([]byte, 0, size), buf...)
		}
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, held, errBodyUnread(err)
		}
	}
	switch {
	case int64(len(buf)) > limit:
		return nil, held, errBodyTooLarge(limit, "")
	case n > 0 && int64(len(buf)) < n:
		return nil, held, errBodyUnread(io.ErrUnexpectedEOF)
	}
	return buf, held, nil
}

// streamBody is an upload's body as it arrives, at most limit bytes.
type streamBody struct {
	r           io.Reader
	left, limit int64
	eof         bool // read to its end: the connection may serve another request
}

func (b *streamBody) Read(p []byte) (int, error) {
	if b.r == nil || b.eof {
		b.eof = true
		return 0, io.EOF
	}
	// One byte past the limit tells the body is longer.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if b.left -= int64(n); b.left < 0 {
		return 0, errBodyTooLarge(b.limit, uploadLimitWhat)
	}
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
	case err != nil:
		// The client's fault (gone, too slow), not the server's.
		err = errBodyUnread(err)
	}
	return n, err
}

// uploadBody is the body of an upload request: streamed as it arrives
// (readBody left it unread), or the body in memory.
func uploadBody(c *fiber.Ctx) io.Reader {
	if b, ok := c.Locals(localBody).(*streamBody); ok {
		return b
	}
	return bytes.NewReader(c.Body())
}
