package daemon

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/codumentor/codumentor/sandboxkit/egress"
)

// egressMetrics count the attempts through the sandboxes' egress
// proxies (GET /metrics). Labels are the source (agent: a
// conversation's external agent; setup: a repository's setup script;
// mcp: an MCP server)
// and the verdict, never a host: refused names are the sandbox's to
// choose, without bound.
type egressMetrics struct {
	attempts *prometheus.CounterVec
	bytes    *prometheus.CounterVec
}

func newEgressMetrics(reg prometheus.Registerer) *egressMetrics {
	m := &egressMetrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_egress_attempts_total", Help: "Connection attempts through the sandboxes' egress proxies, by source and verdict (allowed, refused, failed).",
		}, []string{"source", "verdict"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_egress_bytes_total", Help: "Bytes relayed by the sandboxes' egress proxies, by source and direction (sent, received).",
		}, []string{"source", "direction"}),
	}
	reg.MustRegister(m.attempts, m.bytes)
	return m
}

// observer counts the events of one source.
func (m *egressMetrics) observer(source string) func(egress.Event) {
	return func(e egress.Event) {
		m.attempts.WithLabelValues(source, e.Verdict).Inc()
		m.bytes.WithLabelValues(source, "sent").Add(float64(e.Sent))
		m.bytes.WithLabelValues(source, "received").Add(float64(e.Received))
	}
}
