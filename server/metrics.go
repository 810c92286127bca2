package server

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cpmla/cpmla/spec"
)

// Stats is what the server reads from the engine when /metrics is scraped.
// Every method must be cheap and safe for concurrent use (a nil Stats
// leaves those metrics out). A Stats that also implements CollectiveStats
// or SchedulerStats adds those series.
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

// SchedulerStats is the optional part of Stats for engines that preempt
// and keep a prefix cache.
type SchedulerStats interface {
	// Preemptions counts requests preempted since start-up.
	Preemptions() int64
	// PrefixCache counts the prompt tokens looked up in the prefix cache
	// and those found there.
	PrefixCache() (queries, hits int64)
}

// SpecStats is the optional part of Stats for engines that decode
// speculatively; ok is false when speculation is off (then the series are
// left out, as vLLM leaves them out).
type SpecStats interface {
	SpecDecode() (st spec.Stats, ok bool)
}

// Bucket boundaries are vLLM's, so that dashboards and alerts written for
// vLLM read the same histograms.
var (
	firstTokenBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	outputTokenBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	nBuckets = []float64{1, 2, 5, 10, 20}
)

// buckets125 is 1, 2, 5, 10, 20, 50, … up to max (vLLM's token-count
// histograms).
func buckets125(max int) []float64 {
	var b []float64
	for e := 1; ; e *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*e > max {
				return b
			}
			b = append(b, float64(m*e))
		}
	}
}

// metrics are one server's Prometheus metrics, named like vLLM's under a
// prefix ("vllm:" by default) and labelled model_name and engine as vLLM's.
type metrics struct {
	registry *prometheus.Registry
	labels   prometheus.Labels

	waiting, running prometheus.Gauge
	ttft, tpot, itl  prometheus.Observer
	reqTPOT          prometheus.Observer
	e2e, queue       prometheus.Observer
	prefill, decode  prometheus.Observer
	inference        prometheus.Observer
	promptHist       prometheus.Observer
	genHist          prometheus.Observer
	nHist, maxTokens prometheus.Observer
	promptTokens     prometheus.Counter
	generationTokens prometheus.Counter
	finished         *prometheus.CounterVec
	rejected         *prometheus.CounterVec
}

func newMetrics(prefix, model string, maxModelLen int, stats Stats) *metrics {
	m := &metrics{registry: prometheus.NewRegistry(), labels: prometheus.Labels{"model_name": model, "engine": "0"}}
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Name: prefix + name, Help: help, ConstLabels: m.labels})
		m.registry.MustRegister(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: prefix + name, Help: help, ConstLabels: m.labels})
		m.registry.MustRegister(c)
		return c
	}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: prefix + name, Help: help, Buckets: buckets, ConstLabels: m.labels})
		m.registry.MustRegister(h)
		return h
	}
	m.waiting = gauge("num_requests_waiting", "Requests admitted by the server that have not received their first token.")
	m.running = gauge("num_requests_running", "Requests that are generating tokens.")
	m.ttft = hist("time_to_first_token_seconds", "Histogram of time to first token in seconds.", firstTokenBuckets)
	m.tpot = hist("time_per_output_token_seconds", "Histogram of time per output token in seconds (every gap between consecutive tokens).", outputTokenBuckets)
	m.itl = hist("inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", outputTokenBuckets)
	m.reqTPOT = hist("request_time_per_output_token_seconds", "Histogram of a request's mean time per output token after the first, in seconds.", outputTokenBuckets)
	m.e2e = hist("e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestBuckets)
	m.queue = hist("request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestBuckets)
	m.inference = hist("request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestBuckets)
	m.prefill = hist("request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestBuckets)
	m.decode = hist("request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestBuckets)
	tokenBuckets := buckets125(maxModelLen)
	m.promptHist = hist("request_prompt_tokens", "Number of prefill tokens processed.", tokenBuckets)
	m.genHist = hist("request_generation_tokens", "Number of generation tokens processed.", tokenBuckets)
	m.maxTokens = hist("request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokenBuckets)
	m.nHist = hist("request_params_n", "Histogram of the n request parameter.", nBuckets)
	m.promptTokens = counter("prompt_tokens_total", "Number of prefill tokens processed.")
	m.generationTokens = counter("generation_tokens_total", "Number of generation tokens processed.")
	m.finished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: prefix + "request_success_total", Help: "Count of successfully processed requests, by finish reason (stop, length, abort).", ConstLabels: m.labels,
	}, []string{"finished_reason"})
	m.rejected = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: prefix + "request_rejected_total", Help: "Requests refused before reaching the engine, by HTTP status.",
	}, []string{"model_name", "status"})
	m.registry.MustRegister(m.finished, m.rejected)
	if stats != nil {
		m.registry.MustRegister(newStatsCollector(prefix, m.labels, stats))
	}
	return m
}

// statsCollector reads the engine's Stats at scrape time.
type statsCollector struct {
	stats                       Stats
	kvUsage, collective, builds *prometheus.Desc
	preemptions, queries, hits  *prometheus.Desc
	// vLLM's spec-decode counters, when the engine speculates.
	spec                                  SpecStats
	drafts, draftTokens, accepted, perPos *prometheus.Desc
}

func newStatsCollector(prefix string, labels prometheus.Labels, s Stats) *statsCollector {
	d := func(name, help string, vars ...string) *prometheus.Desc {
		return prometheus.NewDesc(prefix+name, help, vars, labels)
	}
	return &statsCollector{
		stats:       s,
		kvUsage:     d("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage (per rank).", "rank"),
		collective:  d("collective_seconds_total", "Time ranks have spent inside collectives."),
		builds:      d("kernel_plans_built_after_warmup_total", "Kernel plans built after warm-up (0 when warm-up covered every step shape)."),
		preemptions: d("num_preemptions_total", "Cumulative number of preemption from the engine."),
		queries:     d("prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens."),
		hits:        d("prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens."),
		drafts:      d("spec_decode_num_drafts_total", "Number of spec decoding drafts."),
		draftTokens: d("spec_decode_num_draft_tokens_total", "Number of draft tokens."),
		accepted:    d("spec_decode_num_accepted_tokens_total", "Number of accepted tokens."),
		perPos:      d("spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position.", "position"),
		spec:        specStats(s),
	}
}

// specStats is s's SpecStats when the engine speculates, else nil.
func specStats(s Stats) SpecStats {
	if ss, ok := s.(SpecStats); ok {
		if _, on := ss.SpecDecode(); on {
			return ss
		}
	}
	return nil
}

func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.kvUsage
	if _, ok := c.stats.(CollectiveStats); ok {
		ch <- c.collective
	}
	if _, ok := c.stats.(SchedulerStats); ok {
		ch <- c.preemptions
		ch <- c.queries
		ch <- c.hits
	}
	ch <- c.builds
	if c.spec != nil {
		ch <- c.drafts
		ch <- c.draftTokens
		ch <- c.accepted
		ch <- c.perPos
	}
}

func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	for rank, u := range c.stats.KVUsage() {
		ch <- prometheus.MustNewConstMetric(c.kvUsage, prometheus.GaugeValue, u, strconv.Itoa(rank))
	}
	if cs, ok := c.stats.(CollectiveStats); ok {
		ch <- prometheus.MustNewConstMetric(c.collective, prometheus.CounterValue, cs.CollectiveSeconds())
	}
	if ss, ok := c.stats.(SchedulerStats); ok {
		q, h := ss.PrefixCache()
		ch <- prometheus.MustNewConstMetric(c.preemptions, prometheus.CounterValue, float64(ss.Preemptions()))
		ch <- prometheus.MustNewConstMetric(c.queries, prometheus.CounterValue, float64(q))
		ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(h))
	}
	ch <- prometheus.MustNewConstMetric(c.builds, prometheus.CounterValue, float64(c.stats.PlanBuildsAfterWarmup()))
	if c.spec != nil {
		st, _ := c.spec.SpecDecode()
		ch <- prometheus.MustNewConstMetric(c.drafts, prometheus.CounterValue, float64(st.Drafts))
		ch <- prometheus.MustNewConstMetric(c.draftTokens, prometheus.CounterValue, float64(st.DraftTokens))
		ch <- prometheus.MustNewConstMetric(c.accepted, prometheus.CounterValue, float64(st.AcceptedTokens))
		for i, v := range st.PerPos() {
			ch <- prometheus.MustNewConstMetric(c.perPos, prometheus.CounterValue, float64(v), strconv.Itoa(i))
		}
	}
}

// requestTimer follows one engine request through the waiting and running
// gauges and the latency histograms. Its methods are called from the
// request's handler goroutine only; end is idempotent.
type requestTimer struct {
	m       *metrics
	arrival time.Time
	sched   time.Time // first scheduled by the engine
	first   time.Time
	last    time.Time
	tokens  int
	started bool
	once    sync.Once
}

func (m *metrics) admit(arrival time.Time, promptTokens, maxTokens, n int) *requestTimer {
	m.waiting.Inc()
	m.promptTokens.Add(float64(promptTokens))
	m.promptHist.Observe(float64(promptTokens))
	m.maxTokens.Observe(float64(maxTokens))
	m.nHist.Observe(float64(n))
	return &requestTimer{m: m, arrival: arrival}
}

// scheduled records when the engine first scheduled the request.
func (t *requestTimer) scheduled(at time.Time) {
	if t.sched.IsZero() {
		t.sched = at
	}
}

// token records one generated token arriving at now.
func (t *requestTimer) token(now time.Time) {
	t.m.generationTokens.Inc()
	t.tokens++
	if !t.started {
		t.started, t.first = true, now
		t.m.waiting.Dec()
		t.m.running.Inc()
		t.m.ttft.Observe(now.Sub(t.arrival).Seconds())
	} else {
		gap := now.Sub(t.last).Seconds()
		t.m.tpot.Observe(gap)
		t.m.itl.Observe(gap)
	}
	t.last = now
}

// end takes the request out of the gauges; a finished request (reason
// non-empty) is also counted and its phases observed.
func (t *requestTimer) end(now time.Time, reason string) {
	t.once.Do(func() {
		m := t.m
		if t.started {
			m.running.Dec()
		} else {
			m.waiting.Dec()
		}
		if reason == "" {
			return
		}
		m.finished.WithLabelValues(reason).Inc()
		m.e2e.Observe(now.Sub(t.arrival).Seconds())
		m.genHist.Observe(float64(t.tokens))
		if !t.sched.IsZero() {
			m.queue.Observe(t.sched.Sub(t.arrival).Seconds())
			m.inference.Observe(now.Sub(t.sched).Seconds())
			if t.started {
				m.prefill.Observe(t.first.Sub(t.sched).Seconds())
			}
		}
		if t.started {
			m.decode.Observe(t.last.Sub(t.first).Seconds())
		}
		if t.tokens > 1 {
			m.reqTPOT.Observe(t.last.Sub(t.first).Seconds() / float64(t.tokens-1))
		}
	})
}
