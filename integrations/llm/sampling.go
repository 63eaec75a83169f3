package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Sampling are the sampling settings of chat requests. A nil field (an
// empty Stop) is not sent: the endpoint's default applies. A set one is
// sent exactly as given, 0 included.
type Sampling struct {
	// Temperature, 0 to 2 (llm.temperature).
	Temperature *float64 `json:"temperature,omitempty" yaml:"temperature"`
	// TopP, above 0 and at most 1 (llm.top_p).
	TopP *float64 `json:"top_p,omitempty" yaml:"top_p"`
	// MaxTokens caps the tokens of a reply, at least 1 (llm.max_tokens).
	MaxTokens *int `json:"max_tokens,omitempty" yaml:"max_tokens"`
	// Stop are sequences that end a reply: at most maxStops, each
	// non-empty text of at most maxStopBytes (llm.stop).
	Stop []string `json:"stop,omitempty" yaml:"stop"`
	// ExtraBody are members written into each chat request as they are
	// (llm.extra_body), for options of a server such as vLLM's
	// chat_template_kwargs; never one the client writes itself.
	ExtraBody ExtraBody `json:"extra_body,omitempty" yaml:"extra_body"`
}

const (
	maxStops     = 16
	maxStopBytes = 256
	// maxExtraBody bounds the JSON of ExtraBody, in bytes.
	maxExtraBody = 16 << 10
)

// ExtraBody are members of a JSON object, each value as written. In YAML
// it is a mapping, converted to JSON.
type ExtraBody map[string]json.RawMessage

// ownedKeys are the members of a chat request the client writes: an
// ExtraBody may not replace them. The sampling settings have keys of
// their own.
var ownedKeys = map[string]string{
	"model":          "the model is llm.model (or the profile's)",
	"messages":       "the conversation is the engine's",
	"tools":          "the tools are the engine's",
	"stream":         "replies are always streamed",
	"stream_options": "the client asks for usage reports itself",
	"n":              "the engine reads one choice",
	"temperature":    "set llm.temperature instead",
	"top_p":          "set llm.top_p instead",
	"max_tokens":     "set llm.max_tokens instead",
	"stop":           "set llm.stop instead",
}

// UnmarshalYAML reads a mapping, each value converted to JSON.
func (e *ExtraBody) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		*e = nil
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: llm.extra_body must be a mapping (a JSON object), like {chat_template_kwargs: {enable_thinking: false}}", n.Line)
	}
	var m map[string]any
	if err := n.Decode(&m); err != nil {
		return fmt.Errorf("line %d: llm.extra_body: %w", n.Line, err)
	}
	out := make(ExtraBody, len(m))
	for k, v := range m {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: llm.extra_body.%s is not JSON (a mapping's keys must be strings): %v", n.Line, k, err)
		}
		out[k] = b
	}
	*e = out
	return nil
}

// UnmarshalJSON reads a JSON object.
func (e *ExtraBody) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("llm.extra_body must be a JSON object, like {\"chat_template_kwargs\": {\"enable_thinking\": false}}")
	}
	*e = m
	return nil
}

// check reports the first member that is no JSON value, one the client
// owns, or a body over maxExtraBody.
func (e ExtraBody) check() error {
	size := 0
	for _, k := range slices.Sorted(maps.Keys(e)) {
		if why, ok := ownedKeys[k]; ok {
			return fmt.Errorf("%w: llm.extra_body must not set %q: %s", ErrConfig, k, why)
		}
		if k == "" || !json.Valid(e[k]) {
			return fmt.Errorf("%w: llm.extra_body.%s is not a JSON value", ErrConfig, k)
		}
		size += len(k) + len(e[k])
	}
	if size > maxExtraBody {
		return fmt.Errorf("%w: llm.extra_body is %d bytes of JSON; at most %d", ErrConfig, size, maxExtraBody)
	}
	return nil
}

// Check reports the first setting out of range, naming its key
// (llm.temperature, …), wrapping ErrConfig.
func (s Sampling) Check() error {
	switch {
	case s.Temperature != nil && !(*s.Temperature >= 0 && *s.Temperature <= 2):
		return fmt.Errorf("%w: llm.temperature must be 0 to 2, got %v", ErrConfig, *s.Temperature)
	case s.TopP != nil && !(*s.TopP > 0 && *s.TopP <= 1):
		return fmt.Errorf("%w: llm.top_p must be above 0 and at most 1, got %v", ErrConfig, *s.TopP)
	case s.MaxTokens != nil && *s.MaxTokens < 1:
		return fmt.Errorf("%w: llm.max_tokens must be at least 1, got %d", ErrConfig, *s.MaxTokens)
	case len(s.Stop) > maxStops:
		return fmt.Errorf("%w: llm.stop has %d entries; at most %d", ErrConfig, len(s.Stop), maxStops)
	}
	for i, st := range s.Stop {
		if st == "" || len(st) > maxStopBytes || !utf8.ValidString(st) {
			return fmt.Errorf("%w: llm.stop[%d] must be non-empty text of at most %d bytes", ErrConfig, i, maxStopBytes)
		}
	}
	return s.ExtraBody.check()
}

// Over returns s with the settings of o that are set replacing its own:
// a model profile's over the server's; each member of o's ExtraBody
// replaces the one of s's of its name.
func (s Sampling) Over(o Sampling) Sampling {
	if o.Temperature != nil {
		s.Temperature = o.Temperature
	}
	if o.TopP != nil {
		s.TopP = o.TopP
	}
	if o.MaxTokens != nil {
		s.MaxTokens = o.MaxTokens
	}
	if len(o.Stop) > 0 {
		s.Stop = o.Stop
	}
	if len(o.ExtraBody) > 0 {
		extra := maps.Clone(s.ExtraBody)
		if extra == nil {
			extra = ExtraBody{}
		}
		maps.Copy(extra, o.ExtraBody)
		s.ExtraBody = extra
	}
	return s
}

// fields are the set settings, and the members of ExtraBody, as JSON
// members of a chat request.
func (s Sampling) fields() (map[string]json.RawMessage, error) {
	extra := s.ExtraBody
	s.ExtraBody = nil
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: the sampling settings: %v", ErrConfig, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	maps.Copy(m, extra)
	return m, nil
}

// withSampling rewrites a chat completion request's body with fields:
// go-openai drops a temperature or top_p of 0 (omitempty), which is a
// setting, not an absence, and knows no server's extra options.
func withSampling(req *http.Request, fields map[string]json.RawMessage) error {
	if len(fields) == 0 || req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") || req.Body == nil {
		return nil
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return fmt.Errorf("llm: encoding the request: %w", err)
	}
	for k, v := range fields {
		m[k] = v
	}
	if body, err = json.Marshal(m); err != nil {
		return fmt.Errorf("llm: encoding the request: %w", err)
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.ContentLength = int64(len(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	return nil
}
