package api

import (
	"encoding/json"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
)

// maxViolationEvents bounds the seccomp_violation events one answer
// sums.
const maxViolationEvents = 10000

// Violation is one blocklisted call, summed over a conversation's
// seccomp_violation events.
type Violation struct {
	Syscall string `json:"syscall"`
	Command string `json:"command"`
	// Args are the arguments of the first such call.
	Args string `json:"args"`
	// Refusal is what seccomp enforce mode would answer: EPERM, or
	// ENOSYS (C libraries fall back).
	Refusal string    `json:"refusal"`
	Count   int64     `json:"count"`
	First   time.Time `json:"first"`
	Last    time.Time `json:"last"`
}

// Violations is the body of GET /conversations/{id}/sandbox/violations.
type Violations struct {
	Violations []Violation `json:"violations"`
}

// violations sums the conversation's seccomp_violation events by call
// and command, in the order first seen: what would break if
// sandbox.seccomp were switched from log to enforce.
func (s *Server) violations(c *fiber.Ctx) error {
	evs, err := s.d.Conversations.EventsOfType(c.UserContext(), conversation(c).ID, agentcore.EventSeccompViolation, maxViolationEvents)
	if err != nil {
		return err
	}
	out := Violations{Violations: []Violation{}}
	at := map[[2]string]int{}
	for _, ev := range evs {
		var d agentcore.SeccompViolation
		if json.Unmarshal(ev.Data, &d) != nil {
			continue
		}
		k := [2]string{d.Syscall, d.Command}
		i, ok := at[k]
		if !ok {
			i = len(out.Violations)
			at[k] = i
			out.Violations = append(out.Violations, Violation{Syscall: d.Syscall, Command: d.Command, Args: d.Args, Refusal: d.Refusal, First: ev.Time})
		}
		out.Violations[i].Count += d.Count
		out.Violations[i].Last = ev.Time
	}
	return c.JSON(out)
}
