package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codumentor/codumentor/agentcore"
)

// callTool is one of a server's tools, run without asking: the operator
// listed it in auto_approve.
type callTool struct {
	s      *server
	remote string // its name at the server
	spec   agentcore.ToolSpec
}

func (t *callTool) Spec() agentcore.ToolSpec { return t.spec }

func (t *callTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	args, err := decodeArgs(c.Arguments)
	if err != nil {
		return "", fmt.Errorf("invalid arguments for %s: %v", t.spec.Name, err)
	}
	return t.call(ctx, args)
}

// call calls the tool with args at the running server.
func (t *callTool) call(ctx context.Context, args map[string]any) (string, error) {
	sess, p, err := t.s.session()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, t.s.m.o.CallTimeout)
	defer cancel()
	res, err := sess.CallTool(ctx, &sdk.CallToolParams{Name: t.remote, Arguments: args})
	if err != nil {
		// A server that died takes the call with it; say so rather than
		// show the transport's error.
		select {
		case <-p.done:
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
		select {
		case <-p.done:
			return "", fmt.Errorf("MCP server %s stopped during the call (%v); it is being restarted: try again shortly", t.s.cfg.Name, p.err)
		default:
		}
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			return "", fmt.Errorf("MCP server %s did not answer within %s", t.s.cfg.Name, t.s.m.o.CallTimeout)
		}
		return "", fmt.Errorf("MCP server %s: %v", t.s.cfg.Name, err)
	}
	if res.NeedsInput() {
		var asked []string
		for _, r := range res.InputRequests {
			asked = append(asked, inputKind(r))
		}
		slices.Sort(asked)
		return "", fmt.Errorf("MCP server %s asked for %s before it answers; Codumentor refuses servers' sampling, elicitation and roots requests, so the call did not complete", t.s.cfg.Name, cmpOr(strings.Join(slices.Compact(asked), " and "), "more input"))
	}
	text := resultText(res)
	if res.IsError {
		return "", fmt.Errorf("the tool reported an error: %s", text)
	}
	return text, nil
}

// inputKind names what a server's input request asks for.
func inputKind(r sdk.InputRequest) string {
	// Sampling and roots are deprecated (SEP-2577) but still functional:
	// while servers may ask for them, the refusal names what they asked.
	switch r.(type) {
	//lint:ignore SA1019 see above
	case *sdk.CreateMessageParams, *sdk.CreateMessageWithToolsParams:
		return "sampling (a completion from our model)"
	case *sdk.ElicitParams:
		return "elicitation (input from the user)"
	//lint:ignore SA1019 see above
	case *sdk.ListRootsParams:
		return "roots"
	}
	return "input"
}

// gatedTool is a server's tool that needs the user's approval for every
// call: the approval shows the tool and its exact arguments, and Run
// sends exactly those.
type gatedTool struct{ *callTool }

func (g *gatedTool) Prepare(ctx context.Context, c *agentcore.Call) (agentcore.Action, error) {
	args, err := decodeArgs(c.Arguments)
	if err != nil {
		return agentcore.Action{}, fmt.Errorf("invalid arguments for %s: %v", g.spec.Name, err)
	}
	b, err := json.Marshal(args)
	if err != nil {
		return agentcore.Action{}, err
	}
	return agentcore.Action{Command: g.spec.Name + " " + string(b)}, nil
}

func (g *gatedTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	if c.Action == nil {
		return "", fmt.Errorf("%s: not approved", g.spec.Name)
	}
	raw, ok := strings.CutPrefix(c.Action.Command, g.spec.Name+" ")
	if !ok {
		return "", fmt.Errorf("%s: the approved action is not a call of this tool", g.spec.Name)
	}
	args, err := decodeArgs(json.RawMessage(raw))
	if err != nil {
		return "", err
	}
	return g.call(ctx, args)
}

// downTool stands for the tools of a server that is not running and has
// never listed them: calling it says why.
type downTool struct{ s *server }

func (d *downTool) Spec() agentcore.ToolSpec {
	_, _, err := d.s.session()
	return agentcore.ToolSpec{
		Name:        "mcp__" + d.s.cfg.Name,
		Description: "MCP server " + d.s.cfg.Name + " is not available, so its tools are not offered: " + capText(err, 512),
		Parameters:  json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`),
	}
}

func (d *downTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	_, _, err := d.s.session()
	if err == nil {
		return "", fmt.Errorf("MCP server %s is running again: its tools are offered from your next step", d.s.cfg.Name)
	}
	return "", err
}

func capText(err error, n int) string {
	if err == nil {
		return "it is starting"
	}
	s := err.Error()
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// decodeArgs is the call's arguments as a JSON object.
func decodeArgs(raw json.RawMessage) (map[string]any, error) {
	args := map[string]any{}
	if len(strings.TrimSpace(string(raw))) == 0 {
		return args, nil
	}
	if err := json.Unmarshal(raw, &args); err != nil {
		return nil, fmt.Errorf("the arguments must be a JSON object: %v", err)
	}
	if args == nil {
		args = map[string]any{}
	}
	return args, nil
}

// resultText is what a tool result shows the model: its text, and a
// note for each content it cannot read (images, audio, binary).
func resultText(res *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		switch c := c.(type) {
		case *sdk.TextContent:
			b.WriteString(c.Text)
		case *sdk.ImageContent:
			fmt.Fprintf(&b, "[image %s, %d bytes, not shown]", c.MIMEType, len(c.Data))
		case *sdk.AudioContent:
			fmt.Fprintf(&b, "[audio %s, %d bytes, not shown]", c.MIMEType, len(c.Data))
		case *sdk.ResourceLink:
			fmt.Fprintf(&b, "[resource link %s]", c.URI)
		case *sdk.EmbeddedResource:
			if r := c.Resource; r != nil && r.Text != "" {
				fmt.Fprintf(&b, "[resource %s]\n%s", r.URI, r.Text)
			} else if r != nil {
				fmt.Fprintf(&b, "[resource %s, %d bytes of binary, not shown]", r.URI, len(r.Blob))
			}
		default:
			b.WriteString("[content of an unknown type, not shown]")
		}
	}
	if b.Len() == 0 && res.StructuredContent != nil {
		if j, err := json.Marshal(res.StructuredContent); err == nil {
			b.Write(j)
		}
	}
	return b.String()
}

func jsonMarshal(v any) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage(`{"type":"object","properties":{}}`), nil
	}
	return json.Marshal(v)
}

// isObjectSchema reports a JSON Schema of an object: what a model's tool
// parameters must be.
func isObjectSchema(b []byte) bool {
	var s struct {
		Type any `json:"type"`
	}
	return json.Unmarshal(b, &s) == nil && s.Type == "object"
}
