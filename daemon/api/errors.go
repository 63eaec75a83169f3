package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"strconv"
	"syscall"

	"github.com/codumentor/codumentor/daemon/store"
	"github.com/gofiber/fiber/v2"
)

// Error is an API error: its HTTP status and the JSON body
// {"error":{"code","message"}}. Code is stable, for programs; Message is
// for people and says what to do.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// cause holds the errors the message was formatted from, which
	// asAPIError inspects before the message reaches a client.
	cause error
	// retryAfter, if set, is the answer's Retry-After in seconds.
	retryAfter int
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func (e *Error) Unwrap() error { return e.cause }

// StatusMessage is the answer's status and message, for the web UI's
// pages.
func (e *Error) StatusMessage() (int, string) { return e.Status, e.Message }

// apiError formats an answer. An error among args is kept as its cause:
// if that carries an OS error, the client gets a generic answer instead
// (asAPIError), so a handler cannot pass a host path on by formatting.
func apiError(status int, code, format string, args ...any) *Error {
	var causes []error
	for _, a := range args {
		if err, ok := a.(error); ok {
			causes = append(causes, err)
		}
	}
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...), cause: errors.Join(causes...)}
}

func badRequest(format string, args ...any) *Error {
	return apiError(http.StatusBadRequest, "bad_request", format, args...)
}

// The answers that must not differ between cases (an unknown ID and
// another user's ID; a bad and an expired token) are values, so every
// path sends the same bytes.
var (
	errNotFound     = &Error{Status: http.StatusNotFound, Code: "not_found", Message: "no such resource"}
	errUnauthorized = &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "a valid bearer token is required (POST /api/v1/auth/login)"}
	errBadLogin     = &Error{Status: http.StatusUnauthorized, Code: "invalid_credentials", Message: "wrong username or password"}
	errForbidden    = &Error{Status: http.StatusForbidden, Code: "forbidden", Message: "this needs the admin role"}
	errInternal     = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; the server log has the details"}
	errNameTooLong  = &Error{Status: http.StatusBadRequest, Code: "name_too_long", Message: "a name in the path is too long for the file system"}
	errStorageBusy  = &Error{Status: http.StatusServiceUnavailable, Code: "storage_busy", retryAfter: 5,
		Message: "the database is busy (another program holds its write lock longer than store.busy_timeout); nothing was changed, try again in a moment"}
	errMetricsToken = &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "GET /metrics needs the bearer token metrics.token"}
	errStorageFull  = &Error{Status: http.StatusServiceUnavailable, Code: "storage_full", retryAfter: 60,
		Message: "the server's disk is full; nothing was changed. Try again later; the administrator must free space on the instance's file system"}
)

// storageAnswer is the answer to an error of the database or the file
// system that is the server's state, not the request's fault: the
// database locked by another connection beyond the busy timeout, or no
// space left (the database's, ENOSPC, EDQUOT). The one place these are
// told apart, for every route.
func storageAnswer(err error) (*Error, bool) {
	switch store.ErrorKind(err) {
	case store.KindBusy:
		return errStorageBusy, true
	case store.KindFull:
		return errStorageFull, true
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return errStorageFull, true
	}
	return nil, false
}

// errorHandler turns every error a handler returns into the JSON body.
// Unexpected errors and OS errors are logged and answered without their
// detail.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	ae, known := asAPIError(err)
	if !known {
		log := s.log.Error
		if ae.Status < 500 {
			log = s.log.Info
		}
		log("request failed", "method", c.Method(), "path", c.Path(), "status", ae.Status, "err", err)
	}
	if ae.retryAfter > 0 {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(ae.retryAfter))
	}
	b, _ := json.Marshal(map[string]*Error{"error": ae})
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(ae.Status).Send(b)
}

// asAPIError is the answer to err: an *Error as is, Fiber's own errors
// (unknown route, body too large) in the same form, the database busy
// or the disk full a 503 that says so (storageAnswer), anything else a
// 500 without detail (known false: it is worth logging). An error that
// carries an OS error (its text names host paths: lstat
// /home/…/upper/x: file name too long) is never shown, also inside an
// *Error's message: it is answered by its class alone.
func asAPIError(err error) (ae *Error, known bool) {
	if pub, ok := storageAnswer(err); ok {
		return pub, false
	}
	if pub, ok := osAnswer(err); ok {
		return pub, false
	}
	var fe *fiber.Error
	switch {
	case errors.As(err, &ae):
		return ae, true
	case errors.As(err, &fe) && fe.Code == http.StatusNotFound:
		return errNotFound, true
	case errors.As(err, &fe):
		return &Error{Status: fe.Code, Code: fiberCode(fe.Code), Message: fe.Message}, true
	}
	return errInternal, false
}

// osAnswer is the generic answer to an error that carries an OS error.
func osAnswer(err error) (*Error, bool) {
	var (
		pe   *fs.PathError
		le   *os.LinkError
		se   *os.SyscallError
		oe   *net.OpError
		errn syscall.Errno
	)
	if !errors.As(err, &pe) && !errors.As(err, &le) && !errors.As(err, &se) && !errors.As(err, &oe) && !errors.As(err, &errn) {
		return nil, false
	}
	switch {
	case errors.Is(err, syscall.ENAMETOOLONG):
		return errNameTooLong, true
	case errors.Is(err, fs.ErrNotExist):
		return errNotFound, true
	}
	return errInternal, true
}

func fiberCode(status int) string {
	switch status {
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusRequestTimeout:
		return "timeout"
	}
	if status >= 500 {
		return "internal"
	}
	return "error"
}

// decode reads the JSON body into v, refusing unknown fields and
// trailing data, so a misspelt field is an error rather than ignored.
func decode(c *fiber.Ctx, v any) error {
	if len(c.Body()) == 0 {
		return badRequest("the request needs a JSON body")
	}
	dec := json.NewDecoder(bytes.NewReader(c.Body()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("the JSON body is not valid: %v", err)
	}
	if dec.More() {
		return badRequest("the JSON body has data after its object")
	}
	return nil
}
