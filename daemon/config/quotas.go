package config

import "errors"

// Quotas limit what users may use of the model.
type Quotas struct {
	// DailyTokens is every user's daily quota of model tokens (prompt
	// and completion, reported by the endpoint or estimated) per UTC
	// day, unless an admin set the user's own; 0 is none. A turn past it
	// is refused before the model is called (429 quota_exceeded).
	DailyTokens int64 `yaml:"daily_tokens"`
}

func (q Quotas) validate() []error {
	if q.DailyTokens < 0 {
		return []error{errors.New("quotas.daily_tokens must be 0 (no quota) or a positive number of tokens")}
	}
	return nil
}
