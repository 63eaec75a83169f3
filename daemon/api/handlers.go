package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gofiber/fiber/v2"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/ldap"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

func (s *Server) login(c *fiber.Ctx) error {
	var req struct {
		Username string `json:"username"`
		Password string `json:"password"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	u, err := s.checkLogin(c, req.Username, req.Password)
	if err != nil {
		return err
	}
	tok, exp, err := s.d.Tokens.Load().Issue(u)
	if err != nil {
		return err
	}
	s.metrics.logins.WithLabelValues("ok").Inc()
	return c.JSON(fiber.Map{"token": tok, "expires_at": exp.UTC(), "user": u})
}

// checkLogin is the login path of POST /auth/login and of the web UI's
// sign-in: the limiter, the directory, and the answers to refusals.
func (s *Server) checkLogin(c *fiber.Ctx, username, password string) (auth.User, error) {
	if username == "" || password == "" {
		return auth.User{}, badRequest("username and password are required")
	}
	// No user has a longer name: refused before it costs a limiter key,
	// a password check or a log line.
	if len(username) > auth.MaxNameLength {
		return auth.User{}, badRequest("username is longer than %d bytes", auth.MaxNameLength)
	}
	ip := s.clientIP(c)
	u, err := s.d.Login.Login(c.UserContext(), auth.LoginRequest{Username: username, Password: password, IP: ip})
	var limited *auth.RateLimitedError
	switch {
	case errors.As(err, &limited):
		secs := int(limited.RetryAfter.Round(time.Second) / time.Second)
		if secs < 1 {
			secs = 1
		}
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(secs))
		s.metrics.logins.WithLabelValues("rate_limited").Inc()
		return auth.User{}, apiError(http.StatusTooManyRequests, "rate_limited", "too many failed logins; try again in %d s", secs)
	case errors.Is(err, auth.ErrBusy):
		c.Set(fiber.HeaderRetryAfter, "1")
		s.metrics.logins.WithLabelValues("busy").Inc()
		return auth.User{}, apiError(http.StatusServiceUnavailable, "busy", "too many logins at once; try again in a moment")
	case errors.Is(err, ldap.ErrUnavailable):
		s.log.Warn("login: the LDAP directory is unavailable", "user", clip(username), "err", err)
		c.Set(fiber.HeaderRetryAfter, "10")
		s.metrics.logins.WithLabelValues("unavailable").Inc()
		return auth.User{}, apiError(http.StatusServiceUnavailable, "ldap_unavailable", "the user directory (LDAP) cannot be reached; try again later or ask the administrator")
	case errors.Is(err, auth.ErrInvalidCredentials), errors.Is(err, auth.ErrUserDisabled):
		s.log.Info("login refused", "user", clip(username), "ip", ip, "err", err)
		s.metrics.logins.WithLabelValues("refused").Inc()
		return auth.User{}, errBadLogin
	case errors.Is(err, auth.ErrInvalidName):
		return auth.User{}, badRequest("username is longer than %d bytes", auth.MaxNameLength)
	case err != nil:
		s.metrics.logins.WithLabelValues("error").Inc()
		return auth.User{}, err
	}
	return u, nil
}

// clip bounds a client-chosen string for a log line.
func clip(s string) string {
	if len(s) <= auth.MaxNameLength {
		return s
	}
	return strings.ToValidUTF8(s[:auth.MaxNameLength], "") + "…"
}

// logout signs the user out: every token issued to them so far stops
// working (tokens are not tracked one by one, so this ends all of the
// user's sessions).
func (s *Server) logout(c *fiber.Ctx) error {
	if err := s.d.Users.Revoke(c.UserContext(), user(c).ID); err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) me(c *fiber.Ctx) error { return c.JSON(user(c)) }

func (s *Server) createUser(c *fiber.Ctx) error {
	var req struct {
		Name     string `json:"name"`
		Password string `json:"password"`
		Admin    bool   `json:"admin"`
		// OIDCProvider, if set, adds a user of that provider of auth.oidc
		// (no password), who signs in there.
		OIDCProvider string `json:"oidc_provider"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	var u auth.User
	var err error
	if req.OIDCProvider != "" {
		if req.Password != "" {
			return badRequest("a user of an OpenID provider has no password here: leave password out")
		}
		if !slices.ContainsFunc(s.d.OIDC.Providers(), func(p auth.OIDCProviderInfo) bool { return p.Name == req.OIDCProvider }) {
			return badRequest("no OpenID provider %q in auth.oidc", clip(req.OIDCProvider))
		}
		u, err = s.d.Users.AddOIDC(c.UserContext(), user(c).ID, req.Name, req.OIDCProvider, req.Admin)
	} else {
		u, err = s.d.Users.Add(c.UserContext(), auth.AddUser{Name: req.Name, Password: req.Password, Admin: req.Admin, By: user(c).ID})
	}
	switch {
	case errors.Is(err, auth.ErrUserExists):
		return apiError(http.StatusConflict, "exists", "%v", err)
	case errors.Is(err, auth.ErrInvalidName), errors.Is(err, auth.ErrWeakPassword):
		return badRequest("%v", err)
	case errors.Is(err, auth.ErrNotAdmin):
		return errUnauthorized // disabled meanwhile: as its next request
	case err != nil:
		return err
	}
	s.log.Info("user added", "user", u.Name, "admin", req.Admin, "by", user(c).Name)
	return c.Status(http.StatusCreated).JSON(u)
}

func (s *Server) listUsers(c *fiber.Ctx) error {
	us, err := s.d.Users.List(c.UserContext())
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"users": us})
}

func (s *Server) createConversation(c *fiber.Ctx) error {
	var req struct {
		Title string `json:"title"`
		Mode  string `json:"mode"`
		// Repository (ID or name) and Ref (branch or commit; default the
		// branch head) start the conversation on a repository.
		Repository string `json:"repository"`
		Ref        string `json:"ref"`
		// ModelProfile names the caller's model profile whose endpoint
		// the turns use; empty: the server's own model.
		ModelProfile string `json:"model_profile"`
		// Node names the node that is to be the conversation's home,
		// among several; empty: the least loaded.
		Node string `json:"node"`
	}
	if len(c.Body()) > 0 {
		if err := decode(c, &req); err != nil {
			return err
		}
	}
	if cl := s.d.Cluster; cl != nil && !s.forwarded(c).ok {
		// The conversation is made, workspace and all, on its home.
		home := req.Node
		if home == "" {
			n, err := cl.Pick(c.UserContext())
			if err != nil {
				return err
			}
			home = n.ID
		}
		if home != cl.Self() {
			err := s.forward(c, home)
			if req.Node != "" || !errors.Is(err, errNotReached) {
				return err
			}
			// The least loaded node is gone since its last heartbeat:
			// this one takes the conversation.
			c.Response().Reset()
		}
	}
	if err := s.checkMode(user(c), req.Mode); err != nil {
		return err
	}
	if req.Mode != "" && (req.Repository != "" || req.Ref != "") {
		return badRequest("a %s conversation has no workspace: leave out repository and ref", req.Mode)
	}
	if req.ModelProfile != "" {
		if err := s.checkModelProfile(c, req.ModelProfile); err != nil {
			return err
		}
	}
	var repo repos.Repository
	var commit string
	if req.Repository != "" || req.Ref != "" {
		var err error
		if repo, commit, err = s.startOnRepository(c, req.Repository, req.Ref); err != nil {
			return err
		}
	}
	n := store.New{Title: req.Title, ModelProfile: req.ModelProfile}
	if req.Mode == store.ModeHostReadOnly {
		n.Mode = req.Mode
	}
	if commit != "" {
		n.Repository, n.BaseCommit = repo.ID, commit
	}
	conv, err := s.newConversation(c, user(c).ID, n, repo)
	if errors.Is(err, store.ErrBadTitle) {
		return badRequest("%v", err)
	}
	if err != nil {
		return err // the store's failure is for the log only
	}
	if conv.Mode == store.ModeHostReadOnly {
		s.log.Info("host read-only investigation created", "conversation", conv.ID, "user", user(c).Name)
	}
	if commit != "" {
		if err := s.attachRepository(c, &conv, repo); err != nil {
			return err
		}
		s.startSetup(conv, repo)
	}
	return c.Status(http.StatusCreated).JSON(conv)
}

func (s *Server) listConversations(c *fiber.Ctx) error {
	limit, err := queryInt(c, "limit", 100, 1, 1000)
	if err != nil {
		return err
	}
	cs, err := s.d.Conversations.List(c.UserContext(), user(c).ID, int(limit))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"conversations": cs})
}

func (s *Server) getConversation(c *fiber.Ctx) error { return c.JSON(conversation(c)) }

// updateConversation renames the conversation or changes its model
// profile. The profile is checked as at creation, and does not change
// while a turn runs: the turn chose its model as it began.
func (s *Server) updateConversation(c *fiber.Ctx) error {
	var req struct {
		Title        *string `json:"title"`
		ModelProfile *string `json:"model_profile"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Title == nil && req.ModelProfile == nil {
		return badRequest("nothing to change: send title, model_profile or both")
	}
	conv := conversation(c)
	errTurn := apiError(http.StatusConflict, "turn_in_progress", "this conversation has a turn running: change its model profile once the turn has ended (its turn_finished event), or cancel the turn")
	if p := req.ModelProfile; p != nil {
		if *p != "" {
			if err := s.checkModelProfile(c, *p); err != nil {
				return err
			}
		}
		// A turn starting holds the engine's slot before it records
		// turn_started, which the store's condition sees.
		if *p != conv.ModelProfile && s.d.Engine.Turn(conv.ID) != nil {
			return errTurn
		}
	}
	conv, err := s.d.Conversations.Update(c.UserContext(), user(c).ID, conv.ID, store.Change{Title: req.Title, ModelProfile: req.ModelProfile})
	switch {
	case errors.Is(err, store.ErrBadTitle):
		return badRequest("%v", err)
	case errors.Is(err, agentcore.ErrNotFound):
		return errNotFound // deleted since the ownership check
	case errors.Is(err, agentcore.ErrTurnInProgress):
		return errTurn
	case err != nil:
		return err
	}
	return c.JSON(conv)
}

func (s *Server) deleteConversation(c *fiber.Ctx) error {
	conv := conversation(c)
	s.d.Engine.Forget(conv.ID)
	if err := s.d.Conversations.Delete(c.UserContext(), user(c).ID, conv.ID); err != nil {
		return err
	}
	if err := s.d.Layers.Remove(conv.ID); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("removing a deleted conversation's workspace layer failed; workspace GC retries", "conversation", conv.ID, "err", err)
	}
	if r, ok := s.d.Workspaces.(interface{ Remove(string) error }); ok {
		if err := r.Remove(conv.ID); err != nil {
			s.log.Warn("removing a deleted conversation's workspace tree failed", "conversation", conv.ID, "err", err)
		}
	}
	return c.SendStatus(http.StatusNoContent)
}

// maxMessage bounds a user message, in bytes.
const maxMessage = 256 << 10

// decodeContent decodes a message body {"content": …}, refusing content
// that no turn may start with.
func decodeContent(c *fiber.Ctx) (string, error) {
	var req struct {
		Content string `json:"content"`
	}
	if err := decode(c, &req); err != nil {
		return "", err
	}
	switch content := req.Content; {
	case strings.TrimSpace(content) == "":
		return "", badRequest("content is empty")
	case len(content) > maxMessage:
		return "", apiError(http.StatusRequestEntityTooLarge, "too_large", "content is %d bytes; the limit is %d", len(content), maxMessage)
	case !utf8.ValidString(content):
		return "", badRequest("content is not valid UTF-8")
	}
	return req.Content, nil
}

func (s *Server) postMessage(c *fiber.Ctx) error {
	content, err := decodeContent(c)
	if err != nil {
		return err
	}
	return s.startTurn(c, agentcore.TurnRequest{User: user(c).ID, Conversation: conversation(c).ID, Content: content})
}

// startTurn starts r's turn and answers 202 with its ID, or the engine's
// refusal (turnError): a quota used up, a turn running, a conversation
// deleted since the ownership check.
func (s *Server) startTurn(c *fiber.Ctx, r agentcore.TurnRequest) error {
	if err := s.conversationRepository(c, conversation(c), repos.LevelRead); err != nil {
		return err
	}
	t, err := s.d.Engine.StartTurn(c.UserContext(), r)
	if err != nil {
		return turnError(err)
	}
	s.metrics.turns.Inc()
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"turn_id": t.ID})
}

// cancelWait bounds how long POST …/cancel waits for the turn to end.
const cancelWait = 10 * time.Second

// cancelTurn ends the conversation's running turn: its model stream and
// commands are stopped, a pending approval is withdrawn, and
// turn_cancelled is its last event. It answers 200 once the turn has
// ended (202 if it is still ending after cancelWait), 409 without a
// running turn.
func (s *Server) cancelTurn(c *fiber.Ctx) error {
	t := s.d.Engine.Turn(conversation(c).ID)
	if t == nil {
		return apiError(http.StatusConflict, "no_turn", "no turn is running in this conversation")
	}
	t.Cancel()
	wait := time.NewTimer(cancelWait)
	defer wait.Stop()
	select {
	case <-t.Done():
		return c.JSON(fiber.Map{"turn_id": t.ID, "status": "cancelled"})
	case <-wait.C:
	case <-c.UserContext().Done():
	}
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"turn_id": t.ID, "status": "cancelling"})
}

// events streams the conversation's events as server-sent events: the
// stored ones after Last-Event-ID (or ?after=N), then new ones as they
// happen. Each event's id is its sequence number, so a client that
// reconnects with the last id it saw receives exactly what it missed,
// also across server restarts (the log is durable).
func (s *Server) events(c *fiber.Ctx) error {
	after := int64(0)
	raw := c.Get("Last-Event-ID")
	if raw == "" {
		raw = c.Query("after")
	}
	if raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 0 {
			return badRequest("Last-Event-ID / after must be a non-negative event sequence number, not %q", clip(raw))
		}
		after = n
	}
	conv := conversation(c)
	if c.Method() == fiber.MethodHead {
		// The headers a GET would have, and no stream.
		c.Set(fiber.HeaderContentType, "text/event-stream")
		c.Set(fiber.HeaderCacheControl, "no-cache")
		c.Status(http.StatusOK)
		return nil
	}
	tok := strings.Clone(c.Locals(localToken).(string))
	uid := user(c).ID
	if !s.streams.take(s.d.Limits, uid) {
		c.Set(fiber.HeaderRetryAfter, "5")
		return errTooManyStreams
	}
	ctx, cancel := s.streamContext()
	evs := s.d.Engine.Subscribe(ctx, conv.ID, after)
	c.Status(http.StatusOK)
	// The stream takes over the connection: fasthttp's streaming body
	// would pass every event through an extra goroutine and pipe, per
	// subscriber, which is what limits fan-out to many clients.
	c.Context().HijackSetNoResponse(true)
	c.Context().Hijack(func(conn net.Conn) {
		defer s.streams.release(uid)
		s.metrics.subscribers.Inc()
		defer s.metrics.subscribers.Dec()
		defer cancel()
		// A client sends nothing after its request: a read that returns
		// means it went away, noticed now rather than at the next write,
		// so that its place among the capped streams frees at once.
		go func() {
			var b [1]byte
			conn.Read(b[:])
			cancel()
		}()
		w := bufio.NewWriterSize(conn, 8<<10)
		flush := func() bool {
			// A client that stops reading is dropped, not waited for.
			conn.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
			return w.Flush() == nil
		}
		w.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\nConnection: close\r\n\r\n")
		fmt.Fprintf(w, "retry: 2000\n: following %s after %d\n\n", conv.ID, after)
		if !flush() {
			return
		}
		beat := time.NewTicker(s.d.Heartbeat)
		defer beat.Stop()
		for {
			select {
			case ev, ok := <-evs:
				if !ok {
					return
				}
				writeEvent(w, ev)
				// Send what else is ready in the same write.
			more:
				for w.Buffered() < 64<<10 {
					select {
					case ev, ok := <-evs:
						if !ok {
							break more
						}
						writeEvent(w, ev)
					default:
						break more
					}
				}
				if !flush() {
					return
				}
			case <-beat.C:
				// The stream ends once its token would no longer be
				// admitted: expired, revoked, its user disabled.
				if err := s.recheck(ctx, tok); err != nil {
					s.log.Debug("event stream closed", "conversation", conv.ID, "err", err)
					return
				}
				w.WriteString(": heartbeat\n\n")
				if !flush() {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	})
	return nil
}

// recheck is identify for a stream's heartbeat, bounded in time.
func (s *Server) recheck(ctx context.Context, tok string) error {
	ctx, cancel := context.WithTimeout(ctx, sseWriteTimeout)
	defer cancel()
	_, err := s.identify(ctx, tok)
	return err
}

// sseWriteTimeout bounds one write to an event stream's client.
const sseWriteTimeout = 30 * time.Second

// writeEvent writes one server-sent event: id is the sequence number,
// event the type, data the Event as JSON on one line. It is written by
// hand rather than with json.Marshal because every subscriber encodes
// every event; Data is already compact JSON from the store.
func writeEvent(w *bufio.Writer, ev agentcore.Event) {
	b := w.AvailableBuffer()
	b = append(b, "id: "...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, "\nevent: "...)
	b = append(b, ev.Type...)
	b = append(b, "\ndata: {\"seq\":"...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, ev.Type)
	b = append(b, `,"conversation":`...)
	b = appendJSONString(b, ev.Conversation)
	if ev.Turn != "" {
		b = append(b, `,"turn":`...)
		b = appendJSONString(b, ev.Turn)
	}
	b = append(b, `,"time":"`...)
	b = ev.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","data":`...)
	if len(ev.Data) == 0 || bytes.ContainsAny(ev.Data, "\r\n") {
		// Not compact: a newline would end the data: line.
		var buf bytes.Buffer
		if len(ev.Data) == 0 || json.Compact(&buf, ev.Data) != nil {
			buf.Reset()
			buf.WriteString("{}")
		}
		b = append(b, buf.Bytes()...)
	} else {
		b = append(b, ev.Data...)
	}
	b = append(b, "}\n\n"...)
	w.Write(b)
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x7f {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func (s *Server) listApprovals(c *fiber.Ctx) error {
	as, err := s.d.Conversations.Approvals(c.UserContext(), conversation(c).ID)
	if err != nil {
		return err
	}
	if status := c.Query("status"); status != "" {
		kept := as[:0]
		for _, a := range as {
			if string(a.Status) == status {
				kept = append(kept, a)
			}
		}
		as = kept
	}
	return c.JSON(fiber.Map{"approvals": as})
}

func (s *Server) decide(c *fiber.Ctx) error {
	var req struct {
		Decision string `json:"decision"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	var d agentcore.Decision
	switch req.Decision {
	case "approve":
		d = agentcore.DecisionApprove
	case "deny":
		d = agentcore.DecisionDeny
	case "always_allow":
		d = agentcore.DecisionAlwaysAllow
	default:
		return badRequest("decision must be approve, deny or always_allow, not %q", req.Decision)
	}
	err := s.d.Engine.Decide(c.UserContext(), user(c).ID, conversation(c).ID, c.Params("aid"), d)
	switch {
	case errors.Is(err, agentcore.ErrNotFound):
		return errNotFound
	case errors.Is(err, agentcore.ErrApprovalDecided):
		return apiError(http.StatusConflict, "already_decided", "%v", err)
	case err != nil:
		return err
	}
	a, err := s.d.Conversations.Approval(c.UserContext(), c.Params("aid"))
	if err != nil {
		return err
	}
	return c.JSON(a)
}

func (s *Server) diff(c *fiber.Ctx) error {
	conv := conversation(c)
	c.Set(fiber.HeaderContentType, "text/x-diff; charset=utf-8")
	layer, err := s.d.Layers.Get(conv.ID)
	if errors.Is(err, fs.ErrNotExist) {
		c.Set(HeaderPatchSHA256, emptyPatchSHA256)
		return c.SendString("") // nothing changed yet
	}
	if err != nil {
		return err
	}
	lower, err := s.d.Workspaces.Lower(c.UserContext(), user(c).ID, conv.ID)
	if err != nil {
		return err
	}
	p, err := newPatch(lower, layer.Upper, overlay.PatchOptions{})
	if errors.Is(err, overlay.ErrPatchTooLarge) {
		return apiError(http.StatusUnprocessableEntity, "patch_too_large", "%v", err)
	}
	if err != nil {
		return err
	}
	// Streamed: a patch can hold a large binary literal. Written after
	// the handler returns; an error then can only end the body early,
	// with a comment line that says so. Its digest follows as a trailer.
	streamPatch(c, func(w *bufio.Writer) {
		defer p.Close()
		if _, err := p.WriteTo(w); err != nil {
			s.log.Warn("writing a workspace patch failed", "conversation", conv.ID, "err", err)
			w.WriteString("\n# codumentor: the patch is incomplete: the workspace changed while it was written; try again\n")
		}
		w.Flush()
	})
	return nil
}

func (s *Server) files(c *fiber.Ctx) error {
	conv := conversation(c)
	f, err := s.d.Engine.ReadWorkspace(c.UserContext(), user(c).ID, conv.ID, c.Query("path"), c.Query("cursor"))
	switch {
	case errors.Is(err, agentcore.ErrOutsideWorkspace):
		return apiError(http.StatusBadRequest, "outside_workspace", "%v", err)
	case err != nil && strings.Contains(err.Error(), "no such file or directory"):
		return apiError(http.StatusNotFound, "not_found", "%v", err)
	case err != nil:
		return badRequest("%v", err)
	}
	if f.Dir {
		d, err := s.workspaceDir(c.UserContext(), user(c).ID, conv.ID, f)
		if err != nil {
			return err
		}
		return c.JSON(d)
	}
	// Served as bytes, never as something a browser would render: the
	// agent wrote it.
	c.Set(fiber.HeaderContentType, fiber.MIMEOctetStream)
	c.Set(fiber.HeaderXContentTypeOptions, "nosniff")
	c.Set(fiber.HeaderContentSecurityPolicy, "sandbox")
	return c.Send(f.Content)
}

func (s *Server) listSecrets(c *fiber.Ctx) error {
	ms, err := s.d.Secrets.List(c.UserContext(), user(c).ID)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"secrets": ms})
}

func (s *Server) putSecret(c *fiber.Ctx) error {
	var req struct {
		Value string `json:"value"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	m, err := s.d.Secrets.Put(c.UserContext(), user(c).ID, c.Params("name"), req.Value)
	if errors.Is(err, secrets.ErrBadName) || errors.Is(err, secrets.ErrBadValue) {
		return badRequest("%v", err)
	}
	if err != nil {
		return err
	}
	return c.JSON(m)
}

func (s *Server) getSecret(c *fiber.Ctx) error {
	m, err := s.d.Secrets.Meta(c.UserContext(), user(c).ID, c.Params("name"))
	if errors.Is(err, agentcore.ErrNotFound) || errors.Is(err, secrets.ErrBadName) {
		return errNotFound // a name that cannot exist is as absent as any other
	}
	if err != nil {
		return err
	}
	return c.JSON(m)
}

func (s *Server) deleteSecret(c *fiber.Ctx) error {
	err := s.d.Secrets.Delete(c.UserContext(), user(c).ID, c.Params("name"))
	if errors.Is(err, agentcore.ErrNotFound) || errors.Is(err, secrets.ErrBadName) {
		return errNotFound // as for GET: a name that cannot exist is absent
	}
	if err != nil {
		return err
	}
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) getJob(c *fiber.Ctx) error {
	j, err := s.d.Jobs.Get(c.UserContext(), c.Params("id"))
	if errors.Is(err, jobs.ErrNotFound) {
		return errNotFound
	}
	if err != nil {
		return err
	}
	u := user(c)
	if j.Owner != u.ID && u.Role != auth.RoleAdmin {
		return errNotFound
	}
	if j.Kind == repos.KindSync && u.Role != auth.RoleAdmin {
		// A repository admin's sync, once they lose access: as unknown.
		if _, err := s.repository(c, repos.SyncRepository(j), repos.LevelAdmin, errNotFound); err != nil {
			return err
		}
	}
	return c.JSON(j)
}
