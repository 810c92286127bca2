package server

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats is what the server reads from the engine when /metrics is scraped.
// Every method must be cheap and safe for concurrent use (a nil Stats
// leaves those metrics out). A Stats that also implements CollectiveStats
// adds the collective time.
type Stats interface {
	// KVUsage is the fraction (0..1) of KV cache blocks in use, one entry
	// per rank, indexed by rank.
	KVUsage() []float64
	// PlanBuildsAfterWarmup counts kernel plans built after warm-up
	// finished; a healthy engine keeps it at 0.
	PlanBuildsAfterWarmup() uint64
}

// CollectiveStats is the optional part of Stats for engines that time
// their collectives.
type CollectiveStats interface {
	// CollectiveSeconds is the total time ranks have spent inside
	// collectives since start-up.
	CollectiveSeconds() float64
}

// metrics are one server's Prometheus metrics, named like vLLM's under the
// cpmla: prefix.
type metrics struct {
	registry *prometheus.Registry

	waiting, running prometheus.Gauge
	ttft, itl, e2e   prometheus.Histogram
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	finished         *prometheus.CounterVec
	rejected         *prometheus.CounterVec
}

// Latency buckets in seconds: a CPU engine answers in milliseconds for the
// small presets and in minutes for the published shapes.
var (
	firstTokenBuckets = prometheus.ExponentialBucketsRange(0.001, 600, 24)
	interTokenBuckets = prometheus.ExponentialBucketsRange(0.0005, 60, 22)
	requestBuckets    = prometheus.ExponentialBucketsRange(0.01, 3600, 24)
)

func newMetrics(stats Stats) *metrics {
	m := &metrics{registry: prometheus.NewRegistry()}
	m.waiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cpmla:num_requests_waiting",
		Help: "Requests admitted by the server that have not received their first token.",
	})
	m.running = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cpmla:num_requests_running",
		Help: "Requests that are generating tokens.",
	})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cpmla:time_to_first_token_seconds",
		Help:    "Time from the request's arrival to its first generated token.",
		Buckets: firstTokenBuckets,
	})
	m.itl = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cpmla:inter_token_latency_seconds",
		Help:    "Time between consecutive generated tokens of a request.",
		Buckets: interTokenBuckets,
	})
	m.e2e = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "cpmla:e2e_request_latency_seconds",
		Help:    "Time from the request's arrival to its last token.",
		Buckets: requestBuckets,
	})
	m.promptTokens = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cpmla:prompt_tokens_total",
		Help: "Prompt tokens of admitted requests.",
	})
	m.generationTokens = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cpmla:generation_tokens_total",
		Help: "Generated tokens.",
	})
	m.finished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cpmla:request_success_total",
		Help: "Requests that finished, by finish reason (stop, length, abort).",
	}, []string{"finished_reason"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cpmla:request_rejected_total",
		Help: "Requests refused before reaching the engine, by HTTP status.",
	}, []string{"status"})
	m.registry.MustRegister(m.waiting, m.running, m.ttft, m.itl, m.e2e,
		m.promptTokens, m.generationTokens, m.finished, m.rejected)
	if stats != nil {
		m.registry.MustRegister(newStatsCollector(stats))
	}
	return m
}

// statsCollector reads the engine's Stats at scrape time.
type statsCollector struct {
	stats                       Stats
	kvUsage, collective, builds *prometheus.Desc
}

func newStatsCollector(s Stats) *statsCollector {
	return &statsCollector{
		stats: s,
		kvUsage: prometheus.NewDesc("cpmla:kv_cache_usage_perc",
			"Fraction of the rank's KV cache blocks in use (1 = full).", []string{"rank"}, nil),
		collective: prometheus.NewDesc("cpmla:collective_seconds_total",
			"Time ranks have spent inside collectives.", nil, nil),
		builds: prometheus.NewDesc("cpmla:kernel_plans_built_after_warmup_total",
			"Kernel plans built after warm-up (0 when warm-up covered every step shape).", nil, nil),
	}
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.kvUsage
	if _, ok := c.stats.(CollectiveStats); ok {
		ch <- c.collective
	}
	ch <- c.builds
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	for rank, u := range c.stats.KVUsage() {
		ch <- prometheus.MustNewConstMetric(c.kvUsage, prometheus.GaugeValue, u, strconv.Itoa(rank))
	}
	if cs, ok := c.stats.(CollectiveStats); ok {
		ch <- prometheus.MustNewConstMetric(c.collective, prometheus.CounterValue, cs.CollectiveSeconds())
	}
	ch <- prometheus.MustNewConstMetric(c.builds, prometheus.CounterValue, float64(c.stats.PlanBuildsAfterWarmup()))
}

// requestTimer follows one request through the waiting and running gauges
// and the latency histograms. Its methods are called from the request's
// handler goroutine only; end is idempotent.
type requestTimer struct {
	m       *metrics
	arrival time.Time
	last    time.Time
	started bool
	once    sync.Once
}

func (m *metrics) admit(arrival time.Time, promptTokens int) *requestTimer {
	m.waiting.Inc()
	m.promptTokens.Add(float64(promptTokens))
	return &requestTimer{m: m, arrival: arrival}
}

// token records one generated token arriving at now.
func (t *requestTimer) token(now time.Time) {
	t.m.generationTokens.Inc()
	if !t.started {
		t.started = true
		t.m.waiting.Dec()
		t.m.running.Inc()
		t.m.ttft.Observe(now.Sub(t.arrival).Seconds())
	} else {
		t.m.itl.Observe(now.Sub(t.last).Seconds())
	}
	t.last = now
}

// end takes the request out of the gauges; a finished request (reason
// non-empty) is also counted and its latency observed.
func (t *requestTimer) end(now time.Time, reason string) {
	t.once.Do(func() {
		if t.started {
			t.m.running.Dec()
		} else {
			t.m.waiting.Dec()
		}
		if reason != "" {
			t.m.finished.WithLabelValues(reason).Inc()
			t.m.e2e.Observe(now.Sub(t.arrival).Seconds())
		}
	})
}
