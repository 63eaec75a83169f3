package api

import (
	"context"
	"crypto/subtle"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/codumentor/codumentor/daemon/jobs"
	"github.com/codumentor/codumentor/daemon/store"
)

// metrics are the API's Prometheus metrics. Labels hold route patterns,
// never IDs or user names.
type metrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	subscribers prometheus.Gauge
	turns       prometheus.Counter
	logins      *prometheus.CounterVec
	dbErrors    *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry, d Deps) metrics {
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
			Name: "codumentor_logins_total", Help: "Login attempts by result: ok, refused (wrong credentials), rate_limited (429), busy (no password check free), unavailable (LDAP), error (the server's).",
		}, []string{"result"}),
		dbErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codumentor_database_errors_total", Help: "Requests that failed on a database error, by kind: busy (locked beyond store.busy_timeout), full (no space), other.",
		}, []string{"kind"}),
	}
	reg.MustRegister(m.requests, m.duration, m.subscribers, m.turns, m.logins, m.dbErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"ok", "refused", "rate_limited", "busy", "unavailable", "error"} {
		m.logins.WithLabelValues(r)
	}
	for _, k := range []string{"busy", "full", "other"} {
		m.dbErrors.WithLabelValues(k)
	}
	if d.DB != nil {
		if sqlDB, err := d.DB.DB(); err == nil {
			reg.MustRegister(collectors.NewDBStatsCollector(sqlDB, "codumentor"))
		}
	}
	reg.MustRegister(&stateCollector{jobs: d.Jobs, dirs: d.StorageDirs})
	return m
}

// stateCollector reads, at each scrape, what is in the database and on
// the disk rather than counted in memory: the jobs by kind and status,
// and the free space of the file systems of the instance's directories.
type stateCollector struct {
	jobs *jobs.Queue
	dirs map[string]string
}

var (
	jobsDesc = prometheus.NewDesc("codumentor_jobs", "Jobs in the queue by kind and status (queued, running, succeeded, failed).", []string{"kind", "status"}, nil)
	freeDesc = prometheus.NewDesc("codumentor_storage_free_bytes", "Bytes available to the server on the file system of an instance directory (data: the database; workspaces; repos; logs).", []string{"dir"}, nil)
	sizeDesc = prometheus.NewDesc("codumentor_storage_size_bytes", "Size of the file system of an instance directory.", []string{"dir"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- freeDesc
	ch <- sizeDesc
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	if c.jobs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if counts, err := c.jobs.Counts(ctx); err == nil {
			for _, n := range counts {
				ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(n.N), n.Kind, string(n.Status))
			}
		} else {
			ch <- prometheus.NewInvalidMetric(jobsDesc, err)
		}
	}
	for name, dir := range c.dirs {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err == nil {
			ch <- prometheus.MustNewConstMetric(freeDesc, prometheus.GaugeValue, float64(st.Bavail)*float64(st.Bsize), name)
			ch <- prometheus.MustNewConstMetric(sizeDesc, prometheus.GaugeValue, float64(st.Blocks)*float64(st.Bsize), name)
		} else {
			ch <- prometheus.NewInvalidMetric(freeDesc, err)
		}
	}
}

// countDBError counts a request that failed on a database error.
func (m metrics) countDBError(err error) {
	if k := store.ErrorKind(err); k != "" {
		m.dbErrors.WithLabelValues(k).Inc()
	}
}

// serveMetrics is GET /metrics: with metrics.token set, only for a
// bearer of it.
func (s *Server) serveMetrics() fiber.Handler {
	h := adaptor.HTTPHandler(promhttp.HandlerFor(s.d.Registry, promhttp.HandlerOpts{}))
	want := []byte("Bearer " + s.d.MetricsToken)
	return func(c *fiber.Ctx) error {
		if s.d.MetricsToken != "" {
			got := []byte(c.Get(fiber.HeaderAuthorization))
			// The scheme's case does not matter (RFC 9110 §11.1).
			if len(got) > 7 && strings.EqualFold(string(got[:7]), "Bearer ") {
				copy(got[:7], "Bearer ")
			}
			if subtle.ConstantTimeCompare(got, want) != 1 {
				return errMetricsToken
			}
		}
		return h(c)
	}
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
	if err != nil {
		m.countDBError(err)
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
