package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/gofiber/fiber/v2"
)

// Error is an API error: its HTTP status and the JSON body
// {"error":{"code","message"}}. Code is stable, for programs; Message is
// for people and says what to do.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func apiError(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
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
)

// errorHandler turns every error a handler returns into the JSON body.
// Unexpected errors are logged and answered 500 without their detail.
func (s *Server) errorHandler(c *fiber.Ctx, err error) error {
	ae, known := asAPIError(err)
	if !known {
		s.log.Error("request failed", "method", c.Method(), "path", c.Path(), "err", err)
	}
	b, _ := json.Marshal(map[string]*Error{"error": ae})
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.Status(ae.Status).Send(b)
}

// asAPIError is the answer to err: an *Error as is, Fiber's own errors
// (unknown route, body too large) in the same form, anything else a 500
// without detail (known false: it is worth logging).
func asAPIError(err error) (ae *Error, known bool) {
	var fe *fiber.Error
	switch {
	case errors.As(err, &ae):
		return ae, true
	case errors.As(err, &fe) && fe.Code == http.StatusNotFound:
		return errNotFound, true
	case errors.As(err, &fe):
		return &Error{Status: fe.Code, Code: fiberCode(fe.Code), Message: fe.Message}, true
	}
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; the server log has the details"}, false
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
