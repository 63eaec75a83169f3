package browser

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/codumentor/codumentor/agentcore"
)

// FetchTool is the fetch_urls tool: the readable text of web pages.
type FetchTool struct{ B *Browser }

// Spec implements agentcore.Tool.
func (FetchTool) Spec() agentcore.ToolSpec {
	return agentcore.ToolSpec{
		Name:        "fetch_urls",
		Description: fmt.Sprintf("Read web pages: each URL's title, main text (at most %d KiB) and links, as a headless browser shows them. At most %d http or https URLs per call. Requests to internal and metadata addresses are refused.", MaxTextBytes>>10, MaxURLs),
		Parameters:  json.RawMessage(`{"type":"object","properties":{"urls":{"type":"array","items":{"type":"string"},"description":"http or https URLs"}},"required":["urls"],"additionalProperties":false}`),
	}
}

// Run implements agentcore.Tool.
func (t FetchTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	var args struct {
		URLs []string `json:"urls"`
	}
	if err := c.Args(&args); err != nil {
		return "", err
	}
	pages, err := t.B.FetchURLs(ctx, args.URLs)
	if err != nil {
		err = t.B.public(err)
	}
	if err != nil && pages == nil {
		return "", err
	}
	var out strings.Builder
	for i, p := range pages {
		if i > 0 {
			out.WriteString("\n\n")
		}
		fmt.Fprintf(&out, "# %s\n", p.URL)
		if p.Error != "" {
			fmt.Fprintf(&out, "error: %s\n", p.Error)
			continue
		}
		if p.Title != "" {
			fmt.Fprintf(&out, "title: %s\n", p.Title)
		}
		out.WriteString("\n" + p.Text + "\n")
		if p.Truncated {
			fmt.Fprintf(&out, "[text truncated at %d KiB]\n", MaxTextBytes>>10)
		}
		if len(p.Links) > 0 {
			out.WriteString("\nlinks:\n")
			for _, l := range p.Links {
				fmt.Fprintf(&out, "- [%s](%s)\n", l.Text, l.URL)
			}
		}
		if len(p.Refused) > 0 {
			out.WriteString("\nrequests of the page that were refused or failed:\n")
			for _, r := range p.Refused {
				fmt.Fprintf(&out, "- %s\n", r)
			}
		}
	}
	return out.String(), err
}

// DiagramTool is the render_diagram tool: a mermaid diagram as SVG markup
// or a PNG data URL.
type DiagramTool struct{ B *Browser }

// Spec implements agentcore.Tool.
func (DiagramTool) Spec() agentcore.ToolSpec {
	return agentcore.ToolSpec{
		Name:        "render_diagram",
		Description: "Render a mermaid diagram. Returns SVG markup (format svg, the default) or a data:image/png;base64 URL (format png) to put in the answer.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"source":{"type":"string","description":"mermaid source"},"format":{"type":"string","enum":["svg","png"]}},"required":["source"],"additionalProperties":false}`),
	}
}

// Run implements agentcore.Tool.
func (t DiagramTool) Run(ctx context.Context, c *agentcore.Call) (string, error) {
	var args struct {
		Source string `json:"source"`
		Format Format `json:"format"`
	}
	if err := c.Args(&args); err != nil {
		return "", err
	}
	if args.Format == "" {
		args.Format = SVG
	}
	out, err := t.B.RenderDiagram(ctx, args.Source, args.Format)
	if err != nil {
		return "", t.B.public(err)
	}
	if args.Format == PNG {
		return "data:image/png;base64," + base64.StdEncoding.EncodeToString(out), nil
	}
	return string(out), nil
}

// ErrUnavailable is what the model is told when the browser cannot serve
// a request for a reason of the server's (no Chrome, no mermaid, a
// launch failure): the details, which name host paths, go to the log.
var ErrUnavailable = errors.New("the browser is unavailable on this server; the server log says why")

// public is err as the model may see it: its own mistakes (a bad
// diagram, too many URLs) as they are, the server's logged and replaced
// by ErrUnavailable.
func (b *Browser) public(err error) error {
	if errors.Is(err, ErrDiagram) || errors.Is(err, errArgs) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	b.o.Log.Error("browser request failed", "err", err)
	return ErrUnavailable
}
