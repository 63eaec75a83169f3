package daemon

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/codumentor/codumentor/agentcore"
)

// sandboxMetrics count the sandboxes the server starts (GET /metrics):
// starts by launch kind and profile, the limits that stopped commands,
// and the sandboxes running now. Labels are our own names, never a
// command or a conversation.
type sandboxMetrics struct {
	starts *prometheus.CounterVec
	limits *prometheus.CounterVec
}

func newSandboxMetrics(reg prometheus.Registerer) *sandboxMetrics {
	m := &sandboxMetrics{
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_sandbox_starts_total", Help: "Starts in a sandbox, by kind (run, session, session-command) and profile.",
		}, []string{"kind", "profile"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_sandbox_limit_kills_total", Help: "Commands a sandbox limit stopped, by limit (memory, pids, disk, ...).",
		}, []string{"limit"}),
	}
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "codumentor_sandboxes_running", Help: "Sandboxes running now (one-shot ones and conversations').",
	}, func() float64 { return float64(bwrapChildren()) })
	reg.MustRegister(m.starts, m.limits, running)
	return m
}

// started counts a start (nil m: not counted).
func (m *sandboxMetrics) started(kind, profile string) {
	if m != nil {
		m.starts.WithLabelValues(kind, profile).Inc()
	}
}

// observe counts the sandbox_limit events of the conversations.
func (m *sandboxMetrics) observe(e agentcore.Event) {
	if m == nil || e.Type != agentcore.EventSandboxLimit {
		return
	}
	var d agentcore.SandboxLimit
	if json.Unmarshal(e.Data, &d) == nil && d.Limit != "" && len(d.Limit) <= 32 {
		m.limits.WithLabelValues(string(d.Limit)).Inc()
	}
}

// bwrapChildren counts the bwrap processes below this one: every
// sandbox is one (a one-shot Run, or a conversation's Session), started
// by sandboxkit's spawner, a child of the server. What runs inside a
// sandbox is below its bwrap and not looked at (its names are the
// sandbox's to choose).
func bwrapChildren() int {
	n := 0
	level := []string{strconv.Itoa(os.Getpid())}
	for depth := 0; depth < 3 && len(level) > 0; depth++ {
		var next []string
		for _, pid := range level {
			tasks, _ := filepath.Glob("/proc/" + pid + "/task/*/children")
			for _, t := range tasks {
				b, err := os.ReadFile(t)
				if err != nil {
					continue
				}
				for _, f := range bytes.Fields(b) {
					child := string(f)
					if _, err := strconv.Atoi(child); err != nil {
						continue
					}
					if comm, err := os.ReadFile("/proc/" + child + "/comm"); err == nil && string(bytes.TrimSpace(comm)) == "bwrap" {
						n++
						continue
					}
					next = append(next, child)
				}
			}
		}
		level = next
	}
	return n
}
