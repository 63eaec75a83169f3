package api

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"regexp"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/codumentor/codumentor/daemon/audit"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/git"
	"github.com/codumentor/codumentor/sandboxkit"
	"github.com/codumentor/codumentor/sandboxkit/overlay"
)

// HeaderPatchSHA256 carries the hex SHA-256 of the patch GET
// …/workspace/diff sent. The patch is streamed, so it comes as an HTTP
// trailer (announced by "Trailer: X-Patch-SHA256"), computed over exactly
// the bytes sent; an empty workspace's answer has it as a header. POST
// …/workspace/push takes it as diff_sha256.
const HeaderPatchSHA256 = "X-Patch-SHA256"

// repoAnswer maps the repos package's errors to answers.
func repoAnswer(err error) error {
	switch {
	case errors.Is(err, repos.ErrNotFound):
		return errNotFound
	case errors.Is(err, repos.ErrInvalid):
		return badRequest("%v", err)
	case errors.Is(err, repos.ErrExists):
		return apiError(http.StatusConflict, "exists", "%v", err)
	case errors.Is(err, repos.ErrNotSynced):
		return apiError(http.StatusConflict, "not_synced", "the repository has no mirror yet: POST /api/v1/repositories/{id}/sync and wait for its job")
	case errors.Is(err, repos.ErrProtected):
		return apiError(http.StatusForbidden, "protected_branch", "%v", err)
	}
	return err
}

func (s *Server) createRepository(c *fiber.Ctx) error {
	var req struct {
		Name   string `json:"name"`
		URL    string `json:"url"`
		Branch string `json:"branch"`
		// Branches are every branch mirrored and indexed, the default
		// first (branch, if given, must be it).
		Branches   []string `json:"branches"`
		Credential string   `json:"credential"`
		// RunSetup and SetupNetwork: see repos.Repository.
		RunSetup     bool     `json:"run_setup"`
		SetupNetwork bool     `json:"setup_network"`
		SetupEgress  []string `json:"setup_egress"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	r, err := s.d.Repositories.Add(c.UserContext(), repos.Add{Name: req.Name, URL: req.URL, Branch: req.Branch, Branches: req.Branches, Credential: req.Credential, RunSetup: req.RunSetup, SetupNetwork: req.SetupNetwork, SetupEgress: req.SetupEgress, By: user(c).ID})
	if err != nil {
		return repoAnswer(err)
	}
	s.log.Info("repository added", "repository", r.ID, "name", r.Name, "url", r.URL, "by", user(c).Name)
	return c.Status(http.StatusCreated).JSON(r)
}

func (s *Server) listRepositories(c *fiber.Ctx) error {
	rs, err := s.d.Repositories.ListFor(c.UserContext(), user(c))
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"repositories": rs})
}

func (s *Server) getRepository(c *fiber.Ctx) error { return c.JSON(repository(c)) }

func (s *Server) deleteRepository(c *fiber.Ctx) error {
	if err := s.d.Repositories.Delete(c.UserContext(), c.Params("id"), user(c).ID); err != nil {
		return repoAnswer(err)
	}
	s.log.Info("repository deleted", "repository", c.Params("id"), "by", user(c).Name)
	return c.SendStatus(http.StatusNoContent)
}

func (s *Server) syncRepository(c *fiber.Ctx) error {
	j, err := s.d.Repositories.Sync(c.UserContext(), c.Params("id"), user(c).ID)
	if err != nil {
		return repoAnswer(err)
	}
	return c.Status(http.StatusAccepted).JSON(fiber.Map{"job": j})
}

// putInstanceSecret stores an instance secret (a repository credential).
func (s *Server) putInstanceSecret(c *fiber.Ctx) error {
	var req struct {
		Value string `json:"value"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	m, err := s.d.Secrets.Put(audit.ForConversation(c.UserContext(), user(c).ID, ""), repos.InstanceOwner, c.Params("name"), req.Value)
	if errors.Is(err, secrets.ErrBadName) || errors.Is(err, secrets.ErrBadValue) {
		return badRequest("%v", err)
	}
	if err != nil {
		return err
	}
	s.log.Info("instance secret stored", "name", m.Name, "by", user(c).Name)
	return c.JSON(m)
}

func (s *Server) listInstanceSecrets(c *fiber.Ctx) error {
	ms, err := s.d.Secrets.List(c.UserContext(), repos.InstanceOwner)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"secrets": ms})
}

// startOnRepository resolves the repository (ID or name) and ref of a
// new conversation before it is created.
func (s *Server) startOnRepository(c *fiber.Ctx, repository, ref string) (repos.Repository, string, error) {
	ctx := c.UserContext()
	if repository == "" {
		return repos.Repository{}, "", badRequest("ref needs a repository")
	}
	r, _, err := s.d.Repositories.Access(ctx, user(c), repository)
	if errors.Is(err, repos.ErrNotFound) {
		rs, lerr := s.d.Repositories.ListFor(ctx, user(c))
		if lerr != nil {
			return r, "", lerr
		}
		for _, x := range rs {
			if x.Name == repository {
				r, err = x, nil
			}
		}
	}
	if errors.Is(err, repos.ErrNotFound) {
		return r, "", apiError(http.StatusNotFound, "not_found", "no repository %q", clip(repository))
	}
	if err != nil {
		return r, "", err
	}
	commit, err := s.d.Repositories.Resolve(ctx, r, ref)
	if err != nil {
		return r, "", repoAnswer(err)
	}
	return r, commit, nil
}

// attachRepository prepares the snapshot of the conversation's
// repository; on failure the conversation is removed again, unless the
// repository runs a setup (its failure then disables the tools).
func (s *Server) attachRepository(c *fiber.Ctx, conv *store.Conversation, r repos.Repository) error {
	ctx := audit.ForConversation(c.UserContext(), conv.UserID, conv.ID)
	_, err := s.d.Repositories.Snapshot(ctx, r.ID, conv.BaseCommit)
	if errors.Is(err, repos.ErrSnapshot) && !errors.Is(err, repos.ErrSnapshotTooLarge) && r.RunSetup && s.d.Setups != nil {
		// Its setup fails in turn, saying why: the conversation stays,
		// with its workspace tools disabled. A tree too large is
		// refused: no tool could ever use it.
		err = nil
	}
	if err != nil {
		if derr := s.d.Conversations.Delete(ctx, conv.UserID, conv.ID); derr != nil {
			s.log.Warn("removing a conversation whose snapshot failed", "conversation", conv.ID, "err", derr)
		}
		if errors.Is(err, repos.ErrSnapshot) {
			if errors.Is(err, repos.ErrSnapshotTooLarge) {
				return apiError(http.StatusUnprocessableEntity, "snapshot_failed", "%s", err.Error())
			}
			return apiError(http.StatusServiceUnavailable, "snapshot_failed", "%s", err.Error())
		}
		return err
	}
	return nil
}

// patchDigest hashes what a streamed patch sends and, at its end, sets
// the trailer: Read is called by the goroutine that writes the response,
// which writes the trailer after the last Read.
type patchDigest struct {
	r    io.ReadCloser
	h    hashWriter
	resp *fasthttp.Response
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func (d *patchDigest) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.h.Write(p[:n])
	if err == io.EOF {
		d.resp.Header.Set(HeaderPatchSHA256, hex.EncodeToString(d.h.Sum(nil)))
	}
	return n, err
}

func (d *patchDigest) Close() error { return d.r.Close() }

// streamPatch streams w's output as the body, with its digest trailer.
func streamPatch(c *fiber.Ctx, w func(*bufio.Writer)) {
	resp := &c.Context().Response
	resp.Header.SetTrailer(HeaderPatchSHA256)
	resp.SetBodyStream(&patchDigest{r: fasthttp.NewStreamReader(w), h: sha256.New(), resp: resp}, -1)
}

// emptyPatchSHA256 is the digest of the empty patch.
var emptyPatchSHA256 = func() string { h := sha256.Sum256(nil); return hex.EncodeToString(h[:]) }()

var errRepositoryGone = &Error{Status: http.StatusConflict, Code: "repository_gone", Message: "the conversation's repository was deleted"}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// push is POST …/workspace/push: the reviewed patch (its digest must be
// the one GET …/workspace/diff sent) becomes one commit on the
// conversation's base commit, pushed to a new or existing unprotected
// branch.
func (s *Server) push(c *fiber.Ctx) error {
	var req struct {
		Branch     string `json:"branch"`
		Message    string `json:"message"`
		DiffSHA256 string `json:"diff_sha256"`
		// AllowOutsideLinks pushes symlinks that point outside the tree
		// (the diff's comment lists them); without it such a push is
		// refused (409 outside_links).
		AllowOutsideLinks bool `json:"allow_outside_links"`
	}
	if err := decode(c, &req); err != nil {
		return err
	}
	conv := conversation(c)
	ctx := c.UserContext()
	if err := s.conversationRepository(c, conv, repos.LevelPush); err != nil {
		return err
	}
	switch {
	case conv.Repository == "":
		return apiError(http.StatusConflict, "no_repository", "this conversation was not started on a repository: there is nothing to push to")
	case !sha256Hex.MatchString(req.DiffSHA256):
		return badRequest("diff_sha256 must be the 64 lowercase hex digits of the %s that GET …/workspace/diff sent", HeaderPatchSHA256)
	}
	u := user(c)
	email := u.Email
	if email == "" {
		email = u.Name + "@codumentor.invalid"
	}
	name := u.DisplayName
	if name == "" {
		name = u.Name
	}
	res, err := s.d.Repositories.PushWorkspace(audit.ForConversation(ctx, u.ID, conv.ID), repos.Push{
		Repository: conv.Repository, Base: conv.BaseCommit, Branch: req.Branch, Message: req.Message,
		Author: git.Author{Name: name, Email: email}, User: u.ID, Conversation: conv.ID,
		AllowOutsideLinks: req.AllowOutsideLinks,
	}, req.DiffSHA256, func(max int64) (*overlay.Patch, error) {
		if s.d.Engine.Turn(conv.ID) != nil {
			return nil, apiError(http.StatusConflict, "turn_in_progress", "a turn is running and may still change the workspace; push after its turn_finished event")
		}
		return s.workspacePatch(c, conv, max)
	})
	var gerr *git.Error
	var sd *repos.SecretInDiffError
	var ol *repos.OutsideLinksError
	var pe *repos.PatchError
	switch {
	case errors.As(err, &pe):
		// As the error handler answers it: an *Error as is, an OS
		// error by its class.
		return pe.Err
	case errors.Is(err, repos.ErrDiffChanged):
		return apiError(http.StatusConflict, "diff_changed", "the workspace changed since that diff was read: read GET …/workspace/diff again, review it, and push with its %s", HeaderPatchSHA256)
	case errors.Is(err, repos.ErrPatchChanging):
		return apiError(http.StatusConflict, "diff_changed", "the workspace changed while its patch was written; try again")
	case errors.Is(err, repos.ErrEmptyPatch):
		return errEmptyDiff
	case errors.Is(err, repos.ErrPatchTooLarge):
		return apiError(http.StatusRequestEntityTooLarge, "patch_too_large", "%v", err)
	case errors.As(err, &sd):
		where := "in " + sd.File
		switch {
		case sd.File == "":
			where = "in the commit message"
		case sd.Line > 0:
			where = fmt.Sprintf("at %s line %d", sd.File, sd.Line)
		}
		what := "a secret's value"
		if sd.Secret != "" {
			what = "the value of " + sd.Secret
		}
		return apiError(http.StatusConflict, "secret_in_diff", "nothing was pushed: the patch holds %s %s; remove it from the workspace (commands reach a secret as {{secret:NAME}} at run time: keep it out of files), read the diff again and push", what, where)
	case errors.As(err, &ol):
		return apiError(http.StatusConflict, "outside_links", "nothing was pushed: the patch has symlinks that point outside the tree: %s; push with \"allow_outside_links\": true if they are meant", clip(strings.Join(ol.Paths, ", ")))
	case errors.Is(err, repos.ErrNotFound):
		return errRepositoryGone
	case errors.Is(err, repos.ErrInvalid), errors.Is(err, repos.ErrProtected):
		return repoAnswer(err)
	case errors.Is(err, repos.ErrUnrecorded), errors.Is(err, sandboxkit.ErrLaunchRefused):
		return errPushUnrecorded
	case errors.As(err, &gerr) && gerr.Op == "push":
		return apiError(http.StatusBadGateway, "push_failed", "the remote refused the push: %s", gerr.Stderr)
	case err != nil:
		// The database's errors (reading the repository, say) are not
		// a failed commit: the error handler logs and answers them.
		if _, busy := storageAnswer(err); busy || store.ErrorKind(err) != "" {
			return err
		}
		s.log.Error("building a push commit failed", "conversation", conv.ID, "err", err)
		return apiError(http.StatusUnprocessableEntity, "commit_failed", "the patch could not be committed on the conversation's base commit; the server log has the details")
	}
	return c.JSON(res)
}

// errPushUnrecorded: the push (or the sandbox that builds its commit)
// could not be recorded in the audit log, so nothing was pushed.
var errPushUnrecorded = &Error{Status: http.StatusServiceUnavailable, Code: "audit_unavailable", Message: "the push could not be recorded in the audit log, so nothing was pushed; the server log has the details"}

// errEmptyDiff: the workspace has no changes.
var errEmptyDiff = &Error{Status: http.StatusBadRequest, Code: "empty_diff", Message: "the workspace has no changes to push"}

// workspacePatch is the conversation's patch within max bytes, as
// repos.WorkspacePatch; nil for a workspace never written to.
func (s *Server) workspacePatch(c *fiber.Ctx, conv store.Conversation, max int64) (*overlay.Patch, error) {
	layer, err := s.d.Layers.Get(conv.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lower, err := s.d.Workspaces.Lower(c.UserContext(), user(c).ID, conv.ID)
	if err != nil {
		return nil, err
	}
	return newPatch(lower, layer.Upper, overlay.PatchOptions{MaxBytes: max})
}
