package config

import (
	"errors"
	"fmt"
	"strconv"

	"gopkg.in/yaml.v3"
)

// Quotas limit what users may use of the model.
type Quotas struct {
	// DailyTokens is every user's daily quota of model tokens (prompt
	// and completion, reported by the endpoint or estimated) per UTC
	// day, unless an admin set the user's own; 0 is none. A turn past it
	// is refused before the model is called (429 quota_exceeded).
	DailyTokens Tokens `yaml:"daily_tokens"`
}

// Tokens is a whole number of tokens. In YAML it must be written as an
// integer: the YAML decoder would read 1.5 into an int as 1.
type Tokens int64

// UnmarshalYAML reads an integer, refusing anything else.
func (n *Tokens) UnmarshalYAML(node *yaml.Node) error {
	v, err := strconv.ParseInt(node.Value, 10, 64)
	if node.Kind != yaml.ScalarNode || err != nil {
		return fmt.Errorf("line %d: %q is not a whole number of tokens", node.Line, node.Value)
	}
	*n = Tokens(v)
	return nil
}

func (q Quotas) validate() []error {
	if q.DailyTokens < 0 {
		return []error{errors.New("quotas.daily_tokens must be 0 (no quota) or a positive number of tokens")}
	}
	return nil
}
