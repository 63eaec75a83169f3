package api

import (
	"context"
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the API's Prometheus metrics. Labels hold route patterns,
// never IDs or user names.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	subscribers prometheus.Gauge
	turns       prometheus.Counter
	logins      *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) metrics {
	m := metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_http_requests_total", Help: "HTTP requests by method, route pattern and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "codumentor_http_request_duration_seconds", Help: "Time to the response's first byte (SSE: to the stream's start).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"method", "route"}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "codumentor_sse_subscribers", Help: "Open event streams.",
		}),
		turns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codumentor_turns_started_total", Help: "Turns started.",
		}),
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_logins_total", Help: "Login attempts by result.",
		}, []string{"result"}),
	}
	reg.MustRegister(m.requests, m.duration, m.subscribers, m.turns, m.logins,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m metrics) middleware(c *fiber.Ctx) error {
	start := time.Now()
	err := c.Next()
	status := c.Response().StatusCode()
	if err != nil {
		// The error handler has not run yet; its status is what the
		// error will be answered with.
		ae, _ := asAPIError(err)
		status = ae.Status
	}
	route := c.Route().Path
	if status == fiber.StatusNotFound && route == "/" {
		route = "unmatched"
	}
	m.requests.WithLabelValues(c.Method(), route, strconv.Itoa(status)).Inc()
	m.duration.WithLabelValues(c.Method(), route).Observe(time.Since(start).Seconds())
	return err
}

// streamContext is the context of one event stream: it ends with the
// server.
func (s *Server) streamContext() (context.Context, context.CancelFunc) {
	return context.WithCancel(s.ctx)
}
