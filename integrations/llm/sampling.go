package llm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"
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
}

const (
	maxStops     = 16
	maxStopBytes = 256
)

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
	return nil
}

// Over returns s with the settings of o that are set replacing its own:
// a model profile's over the server's.
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
	return s
}

// fields are the set settings as JSON members of a chat request.
func (s Sampling) fields() (map[string]json.RawMessage, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: the sampling settings: %v", ErrConfig, err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// withSampling rewrites a chat completion request's body with fields:
// go-openai drops a temperature or top_p of 0 (omitempty), which is a
// setting, not an absence.
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
