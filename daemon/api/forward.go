package api

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/proxy"
	"github.com/valyala/fasthttp"

	"github.com/codumentor/codumentor/daemon/cluster"
)

// forwardTimeout bounds a forwarded request: the longest a route at home
// takes (a push) with room to spare; beyond it the request is stuck.
const forwardTimeout = 10 * time.Minute

// maxForwardedResponse bounds the answer a node takes from another: the
// largest a route at home sends (a workspace file, a diff) is smaller.
const maxForwardedResponse = 256 << 20

// forwardClient is how a node reaches another.
var forwardClient = &fasthttp.Client{
	Name:                     "codumentor-node",
	MaxResponseBodySize:      maxForwardedResponse,
	NoDefaultUserAgentHeader: true,
	DisablePathNormalizing:   true,
	MaxConnsPerHost:          512,
}

// localForwarded is the Locals key of a request's forwarding, once
// checked.
const localForwarded = "forwarded"

// forwardedBy is what a node that forwarded the request said of its
// client.
type forwardedBy struct {
	ok     bool
	client string // the client's address, as clientIP would give it
	proto  string // http or https, as the client reached the sender
}

// forwarded checks whether another node of the deployment forwarded the
// request (HeaderMAC under the cluster key), and what it said of the
// client; a client's own such headers are ignored.
func (s *Server) forwarded(c *fiber.Ctx) forwardedBy {
	if f, ok := c.Locals(localForwarded).(forwardedBy); ok {
		return f
	}
	var f forwardedBy
	if cl := s.d.Cluster; cl != nil {
		from, mac, client := c.Get(cluster.HeaderFrom), c.Get(cluster.HeaderMAC), c.Get(cluster.HeaderClient)
		if mac != "" && cl.Verify(from, mac, c.Method(), string(c.Request().RequestURI()), client, time.Now()) {
			f.ok = true
			f.client, f.proto, _ = strings.Cut(client, " ")
		}
	}
	c.Locals(localForwarded, f)
	return f
}

// atHome serves the request here if this node is the conversation's
// home, or forwards it there. A conversation from before the database
// was shared becomes this node's.
func (s *Server) atHome(c *fiber.Ctx) error {
	cl := s.d.Cluster
	if cl == nil {
		return c.Next()
	}
	conv := conversation(c)
	home := conv.Home
	if home == "" {
		var err error
		if home, err = s.d.Conversations.Claim(c.UserContext(), conv.ID, cl.Self()); err != nil {
			return err
		}
	}
	if home == cl.Self() {
		return c.Next()
	}
	return s.forward(c, home)
}

// forward sends the request to node and its answer back to the client:
// the same method, URI, headers (the client's credentials, which the
// node checks again) and body, with the cluster's signature over what
// this node saw of the client. A node that is lost, or does not answer,
// is a 503 workspace_unavailable that names it.
func (s *Server) forward(c *fiber.Ctx, node string) error {
	cl := s.d.Cluster
	if s.forwarded(c).ok {
		// Its sender took this node for the home; two nodes that
		// disagree must not pass the request back and forth.
		s.log.Warn("a request forwarded here belongs to another node", "node", node, "path", c.Path())
		return workspaceUnavailable(node, nil)
	}
	n, err := cl.Node(c.UserContext(), node)
	if err != nil {
		if errors.Is(err, cluster.ErrUnavailable) {
			return workspaceUnavailable(node, errNotReached)
		}
		return err
	}
	proto := "http"
	if s.secure(c) {
		proto = "https"
	}
	client := s.clientIP(c) + " " + proto
	uri := string(c.Request().RequestURI())
	h := &c.Request().Header
	h.Set(cluster.HeaderFrom, cl.Self())
	h.Set(cluster.HeaderClient, client)
	h.Set(cluster.HeaderMAC, cl.Sign(c.Method(), uri, client, time.Now()))
	// The browser's Origin is checked against the Host it used.
	c.Request().UseHostHeader = true
	if err := proxy.DoTimeout(c, n.URL+uri, forwardTimeout, forwardClient); err != nil {
		s.log.Warn("forwarding a request to its conversation's home node failed", "node", node, "path", c.Path(), "err", err)
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" || errors.Is(err, fasthttp.ErrDialTimeout) {
			return workspaceUnavailable(node, errNotReached)
		}
		return workspaceUnavailable(node, err)
	}
	return nil
}

// errNotReached is the cause of a workspaceUnavailable answer for a
// node that the request never reached: it is lost, or refused the
// connection.
var errNotReached = errors.New("the node was not reached")

// workspaceUnavailable is the answer for a conversation whose home node
// is lost; cause says why, for the caller.
func workspaceUnavailable(node string, cause error) *Error {
	e := apiError(http.StatusServiceUnavailable, "workspace_unavailable",
		"this conversation's workspace and turns are on node %s, which cannot be reached now; its history can still be read, and this works again once the node is back", node)
	e.retryAfter, e.cause = 10, cause
	return e
}
