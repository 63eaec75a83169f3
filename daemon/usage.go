package daemon

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codumentor/codumentor/agentcore"
	"github.com/codumentor/codumentor/daemon/store"
)

// accounting is the engine's Config.Usage: every model call's usage goes
// to the database (store.Usage) and to the token counters of GET
// /metrics; a user past their daily token quota is refused before the
// model is called. The counters are by model, never by user.
type accounting struct {
	usage    *store.Usage
	tokens   *prometheus.CounterVec
	calls    *prometheus.CounterVec
	refusals prometheus.Counter

	mu     sync.Mutex
	models map[string]bool // model label values in use
}

var _ agentcore.UsageRecorder = (*accounting)(nil)

// Bounds of the counters' model label: a model profile's model is a
// user's to name, and each new name would be a new series forever.
const (
	maxModelLabels = 64
	maxModelLabel  = 128
	otherModel     = "other"
)

func newAccounting(u *store.Usage, reg prometheus.Registerer) *accounting {
	a := &accounting{
		usage: u,
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_llm_tokens_total",
			Help: "Model tokens by model, kind (prompt, completion) and source (reported by the endpoint, or estimated). Past 64 models, the rest count as model=\"other\".",
		}, []string{"model", "kind", "source"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_llm_calls_total", Help: "Model calls by model and source of their token counts (reported, estimated).",
		}, []string{"model", "source"}),
		refusals: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codumentor_quota_refusals_total", Help: "Turns and model calls refused because the user's daily token quota was used up.",
		}),
		models: map[string]bool{},
	}
	reg.MustRegister(a.tokens, a.calls, a.refusals)
	return a
}

func (a *accounting) Allow(ctx context.Context, user string) error {
	err := a.usage.Allow(ctx, user, time.Now())
	if err != nil {
		a.refusals.Inc()
	}
	return err
}

func (a *accounting) Record(ctx context.Context, r agentcore.UsageRecord) error {
	model, source := a.modelLabel(r.Model), "estimated"
	if r.Reported {
		source = "reported"
	}
	a.tokens.WithLabelValues(model, "prompt", source).Add(float64(max(r.PromptTokens, 0)))
	a.tokens.WithLabelValues(model, "completion", source).Add(float64(max(r.CompletionTokens, 0)))
	a.calls.WithLabelValues(model, source).Inc()
	return a.usage.Record(ctx, r)
}

// modelLabel is the model's label value: valid UTF-8 of bounded length,
// one of at most maxModelLabels.
func (a *accounting) modelLabel(model string) string {
	model = strings.ToValidUTF8(model, "\uFFFD")
	if model == "" {
		model = "unknown"
	}
	if len(model) > maxModelLabel {
		return otherModel
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.models[model] {
		if len(a.models) >= maxModelLabels {
			return otherModel
		}
		a.models[model] = true
	}
	return model
}
