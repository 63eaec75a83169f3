package daemon

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The token counters' model label stays bounded whatever model names
// users' profiles give: at most maxModelLabels values, each valid UTF-8
// and short, the rest "other".
func TestModelLabelBounded(t *testing.T) {
	a := newAccounting(nil, prometheus.NewRegistry())
	for i := range maxModelLabels {
		if got := a.modelLabel(fmt.Sprintf("model-%d", i)); got != fmt.Sprintf("model-%d", i) {
			t.Fatalf("model %d labelled %q", i, got)
		}
	}
	for in, want := range map[string]string{
		"model-3":                "model-3", // already counted
		"model-new":              otherModel,
		strings.Repeat("m", 200): otherModel,
		"":                       otherModel, // "unknown" is a new value past the bound
		"model-0\xff":            otherModel,
	} {
		if got := a.modelLabel(in); got != want {
			t.Errorf("modelLabel(%q) = %q; want %q", in, got, want)
		}
	}
	b := newAccounting(nil, prometheus.NewRegistry())
	if got := b.modelLabel("bad\xffname"); got != "bad\uFFFDname" {
		t.Errorf("invalid UTF-8 labelled %q", got)
	}
	if got := b.modelLabel(""); got != "unknown" {
		t.Errorf("no model labelled %q", got)
	}
}
