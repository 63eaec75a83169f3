package agentcore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// ErrToolExists is returned by Register for a name already taken.
var ErrToolExists = errors.New("agentcore: a tool with this name is registered")

// Tool is something the model can call. Spec().Name is the name the model
// and the UI see; it must be unique in an Engine.
//
// Run's result text goes back to the model (after redaction and the
// output cap). An error is shown to the model too, as "error: …": write
// errors the model can act on. Run must honour ctx, which is cancelled
// when the turn is.
type Tool interface {
	Spec() ToolSpec
	Run(ctx context.Context, c *Call) (string, error)
}

// ExecTool is a Tool that executes something the model wrote: the
// approval gate stands in front of it. The runtime calls Prepare, asks
// for approval of the returned Action (unless the conversation or the
// server always allows), and only then calls Run with Call.Action set to
// exactly the approved Action. Run must execute Call.Action, not
// re-read the arguments.
type ExecTool interface {
	Tool
	// Prepare checks the arguments and says what would be executed,
	// without executing anything.
	Prepare(ctx context.Context, c *Call) (Action, error)
}

// Action is what an ExecTool executes, as an approval shows it.
type Action struct {
	// Command is the command line, secret placeholders unexpanded.
	Command string
	// Cwd is the working directory inside the sandbox.
	Cwd        string
	Background bool
	// Kind is the approval's Kind (empty: a command).
	Kind string
}

// Call is one tool call of a turn.
type Call struct {
	ID           string
	Name         string
	Arguments    json.RawMessage
	User         string
	Conversation string
	Turn         string
	// Action is set for an ExecTool once its Action was approved.
	Action *Action

	turn *Turn
}

// Args decodes the call's arguments into v, with an error the model can
// read.
func (c *Call) Args(v any) error {
	args := c.Arguments
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	if err := json.Unmarshal(args, v); err != nil {
		return fmt.Errorf("invalid arguments for %s: %v", c.Name, err)
	}
	return nil
}

// checkArgs refuses arguments that are not a JSON object, and names
// unknown to a schema that says "additionalProperties": false, before any
// tool sees them: a misspelt argument would otherwise be silently
// ignored.
func checkArgs(spec ToolSpec, args json.RawMessage) error {
	schema, ok := closedSchemas.get(spec.Parameters)
	if !ok {
		return nil
	}
	if len(args) == 0 {
		return nil
	}
	var got map[string]json.RawMessage
	if err := json.Unmarshal(args, &got); err != nil {
		return fmt.Errorf("invalid arguments for %s: want a JSON object: %v", spec.Name, err)
	}
	for _, name := range slices.Sorted(maps.Keys(got)) {
		if _, ok := schema.Properties[name]; !ok {
			known := "none"
			if len(schema.Properties) > 0 {
				known = strings.Join(slices.Sorted(maps.Keys(schema.Properties)), ", ")
			}
			return fmt.Errorf("invalid arguments for %s: unknown argument %q; the arguments are: %s", spec.Name, name, known)
		}
	}
	return nil
}

// ToolSource offers tools known only at run time, e.g. those an MCP
// server lists once it runs. The engine calls Tools before every model
// request and to find a called tool it has not registered; it must
// return quickly once it knows its tools, honour ctx while it learns
// them, and be safe for concurrent use. A name taken by a registered tool
// or an earlier source is skipped: the first one keeps it.
type ToolSource interface {
	Tools(ctx context.Context) []Tool
}

// registry holds an Engine's tools.
type registry struct {
	mu      sync.RWMutex
	tools   map[string]Tool
	sources []ToolSource
	// byName is tools sorted by name, made once after each add; gen
	// counts the adds.
	byName []Tool
	gen    uint64
}

func (r *registry) addSource(s ToolSource) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sources = append(r.sources, s)
	r.byName, r.gen = nil, r.gen+1
}

func (r *registry) add(t Tool) error {
	name := t.Spec().Name
	if name == "" {
		return errors.New("agentcore: a tool needs a name")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tools == nil {
		r.tools = map[string]Tool{}
	}
	if _, ok := r.tools[name]; ok {
		return fmt.Errorf("%w: %s", ErrToolExists, name)
	}
	r.tools[name] = t
	r.byName, r.gen = nil, r.gen+1
	return nil
}

func (r *registry) get(ctx context.Context, name string) Tool {
	r.mu.RLock()
	t, sources := r.tools[name], len(r.sources) > 0
	r.mu.RUnlock()
	if t != nil || !sources {
		return t // a registered tool comes before the sources'
	}
	return r.all(ctx)[name]
}

// sorted returns the tools by name, so requests are deterministic; the
// caller must not change the slice. gen is the registry's generation
// while it has no sources (the same gen, the same tools), 0 otherwise.
func (r *registry) sorted(ctx context.Context) (tools []Tool, gen uint64) {
	r.mu.RLock()
	tools, gen, sources := r.byName, r.gen, len(r.sources) > 0
	r.mu.RUnlock()
	if !sources && tools != nil {
		return tools, gen
	}
	all := r.all(ctx)
	tools = make([]Tool, 0, len(all))
	for _, n := range slices.Sorted(maps.Keys(all)) {
		tools = append(tools, all[n])
	}
	if sources {
		return tools, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen || len(r.sources) > 0 {
		return tools, 0 // changed meanwhile: not kept
	}
	r.byName = tools
	return tools, gen
}

// all is the registered tools and the sources' by name.
func (r *registry) all(ctx context.Context) map[string]Tool {
	r.mu.RLock()
	all := maps.Clone(r.tools)
	sources := slices.Clone(r.sources)
	r.mu.RUnlock()
	if all == nil {
		all = map[string]Tool{}
	}
	for _, s := range sources {
		for _, t := range s.Tools(ctx) {
			if n := t.Spec().Name; n != "" && all[n] == nil {
				all[n] = t
			}
		}
	}
	return all
}

// schema is a small helper for tool parameter schemas.
func schema(required []string, props map[string]any) json.RawMessage {
	if required == nil {
		required = []string{}
	}
	b, err := json.Marshal(map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false})
	if err != nil {
		panic(err)
	}
	return b
}

func prop(typ, desc string) map[string]any { return map[string]any{"type": typ, "description": desc} }

// closedSchema is what checkArgs reads of a tool's parameter schema.
type closedSchema struct {
	Properties           map[string]json.RawMessage
	AdditionalProperties *bool
}

// schemaCache keeps the schemas checkArgs parsed, by their text: a tool's
// schema is the same at every call. It is bounded, since tool sources
// may offer ever new tools.
type schemaCache struct {
	mu sync.Mutex
	m  map[string]*closedSchema // nil: not closed (or not a schema)
}

var closedSchemas schemaCache

const maxCachedSchemas = 256

// get returns the schema params, if it is an object schema that says
// "additionalProperties": false.
func (c *schemaCache) get(params json.RawMessage) (*closedSchema, bool) {
	if len(params) == 0 {
		return nil, false
	}
	c.mu.Lock()
	s, ok := c.m[string(params)]
	c.mu.Unlock()
	if !ok {
		s = new(closedSchema)
		if json.Unmarshal(params, s) != nil || s.AdditionalProperties == nil || *s.AdditionalProperties {
			s = nil
		}
		c.mu.Lock()
		if len(c.m) >= maxCachedSchemas || c.m == nil {
			c.m = map[string]*closedSchema{}
		}
		c.m[string(params)] = s
		c.mu.Unlock()
	}
	return s, s != nil
}
