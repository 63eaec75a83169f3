// Command probeserver is an MCP stdio server for tests. Its tool probe
// says what the process can reach: whether it connects to a TCP address
// and reads a file it is given. It also lists tools the model cannot be
// offered: files.read (a '.', which MCP allows and the model's tool
// names do not) and one whose name is too long with its prefix.
package main

import (
	"context"
	"net"
	"os"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	s := sdk.NewServer(&sdk.Implementation{Name: "probeserver", Version: "1"}, nil)
	sdk.AddTool(s, &sdk.Tool{Name: "probe", Description: "Say whether addr connects and file reads"}, func(ctx context.Context, _ *sdk.CallToolRequest, in struct {
		Addr string `json:"addr"`
		File string `json:"file"`
	}) (*sdk.CallToolResult, any, error) {
		var out []string
		if c, err := net.DialTimeout("tcp", in.Addr, 5*time.Second); err != nil {
			out = append(out, "dial=failed")
		} else {
			c.Close()
			out = append(out, "dial=connected")
		}
		if _, err := os.ReadFile(in.File); err != nil {
			out = append(out, "file=unreadable")
		} else {
			out = append(out, "file=read")
		}
		return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Join(out, " ")}}}, nil, nil
	})
	for _, name := range []string{"files.read", "a-tool-name-that-is-far-too-long-once-prefixed-for-the-model"} {
		sdk.AddTool(s, &sdk.Tool{Name: name, Description: "Not offered to the model"}, func(context.Context, *sdk.CallToolRequest, struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "called"}}}, nil, nil
		})
	}
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil {
		os.Exit(1)
	}
}
