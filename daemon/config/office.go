package config

import (
	"errors"
	"time"
)

// PluginOffice lets users attach office documents and PDFs to a
// conversation; each is parsed by the office worker in its own sandbox
// (no network, no workspace) and read by the model with read_attachment.
const PluginOffice = "office"

// Office configures the office plugin. The worker uses sandbox.bwrap and
// sandbox.seccomp.
type Office struct {
	// MaxBytes caps an uploaded attachment (default 25 MiB).
	MaxBytes int64 `yaml:"max_bytes"`
	// Timeout bounds one document's parse (default 60s).
	Timeout Duration `yaml:"timeout"`
	// Parallel caps the parses running at once (default 2); more
	// uploads wait for a turn.
	Parallel int `yaml:"parallel"`
}

// DefaultOffice is the office plugin's default configuration.
func DefaultOffice() Office {
	return Office{MaxBytes: 25 << 20, Timeout: Duration(60 * time.Second), Parallel: 2}
}

func (o Office) validate() []error {
	var errs []error
	if o.MaxBytes <= 0 || o.MaxBytes > 1<<30 {
		errs = append(errs, errors.New("office.max_bytes must be between 1 and 1073741824 bytes"))
	}
	if o.Timeout <= 0 {
		errs = append(errs, errors.New("office.timeout must be positive"))
	}
	if o.Parallel <= 0 {
		errs = append(errs, errors.New("office.parallel must be positive"))
	}
	return errs
}
