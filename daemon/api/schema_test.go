package api

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/auth"
	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/repos"
	"github.com/codumentor/codumentor/daemon/secrets"
	"github.com/codumentor/codumentor/daemon/store"
	"github.com/codumentor/codumentor/integrations/mcp"
)

// The schemas of openapi.json name exactly the JSON fields of the Go
// values the server sends, and a field the server can send as null (a
// pointer) is typed nullable.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Type any `json:"type"`
				} `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{
		"User":                auth.User{},
		"Conversation":        store.Conversation{},
		"Event":               agentcore.Event{},
		"Approval":            agentcore.Approval{},
		"SecretMeta":          secrets.Meta{},
		"Job":                 jobs.Job{},
		"Readiness":           Readiness{},
		"MCPServers":          MCPServers{},
		"MCPServer":           mcp.Status{},
		"Repository":          repos.Repository{},
		"PushResult":          repos.PushResult{},
		"Progress":            jobs.Progress{},
		"Attachment":          store.Attachment{},
		"SearchHit":           agentcore.Hit{},
		"AuditPage":           AuditPage{},
		"Violation":           Violation{},
		"ModelProfile":        ModelProfile{},
		"UsageReport":         UsageReport{},
		"UsageGroup":          UsageGroup{},
		"UsageTotals":         store.UsageTotals{},
		"Quota":               store.Quota{},
		"ConversationContext": agentcore.Context{},
	} {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("openapi.json has no schema %s", name)
			continue
		}
		fields := jsonFields(reflect.TypeOf(v))
		var documented []string
		for p := range schema.Properties {
			documented = append(documented, p)
		}
		for f, nullable := range fields {
			prop, ok := schema.Properties[f]
			switch {
			case !ok:
				t.Errorf("%s: the server sends %q, openapi.json does not document it", name, f)
			case nullable && !allowsNull(prop.Type):
				t.Errorf("%s.%s: the server can send null, openapi.json types it %v", name, f, prop.Type)
			}
		}
		for _, p := range documented {
			if _, ok := fields[p]; !ok {
				t.Errorf("%s: openapi.json documents %q, the server never sends it", name, p)
			}
		}
	}
}

// jsonFields maps the JSON names of t's fields to whether they can be null.
func jsonFields(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		// A nil pointer is sent as null (omitempty aside). Slices are left
		// out: the server builds the ones it sends.
		out[name] = f.Type.Kind() == reflect.Pointer && !strings.Contains(opts, "omitempty")
	}
	return out
}

func allowsNull(typ any) bool {
	switch v := typ.(type) {
	case nil:
		return true // no type: anything
	case []any:
		return slices.Contains(v, any("null"))
	}
	return false
}
