package metrics

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/duet-ai/duet/sdk/engine"
)

// maxEngineMetrics bounds the engine-wide figures (engine.Stats.Metrics) exported, by name: an engine is
// a plugin anyone can write, and its map must not grow the series without bound. Names past it (in sorted
// order) are dropped.
const maxEngineMetrics = 64

// statsTimeout bounds one Stats call: a scrape never waits longer than this on the engine.
const statsTimeout = 2 * time.Second

// statsCache polls the engine's Stats at most once per every, however many scrapers read it and however often:
// a scrape within every of the last call reuses its answer, and concurrent scrapes share one call.
type statsCache struct {
	every time.Duration
	fetch func(context.Context) (engine.Stats, error)

	mu    sync.Mutex // held during a fetch, so concurrent readers wait for it rather than call again
	at    time.Time
	stats engine.Stats
	err   error
	calls int // Stats calls made, for tests
}

// get returns the latest Stats, calling the engine when the last answer is older than every.
func (c *statsCache) get() (engine.Stats, error) {
	if c == nil || c.fetch == nil {
		return engine.Stats{}, errNoEngine
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < c.every {
		return c.stats, c.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	c.stats, c.err = c.fetch(ctx)
	cancel()
	c.at = time.Now()
	c.calls++
	return c.stats, c.err
}

type noEngineError struct{}

func (noEngineError) Error() string { return "no engine stats source" }

var errNoEngine error = noEngineError{}

// The state series: read from Sources when scraped.
var (
	descInstanceInFlight = prometheus.NewDesc("duet_instance_in_flight",
		"Generations the gateway runs on each of this node's instances now.", []string{"instance", "model"}, nil)
	descEngineUp = prometheus.NewDesc("duet_engine_stats_up",
		"1 when the engine answered its last Stats call (polled at most once per --metrics-stats-interval), 0 when it failed.", nil, nil)
	descEngineInFlight = prometheus.NewDesc("duet_engine_in_flight",
		"Requests the engine runs on an instance now, as the engine reports them.", []string{"instance"}, nil)
	descEngineQueued = prometheus.NewDesc("duet_engine_queue_depth",
		"Requests waiting in the engine's queue of an instance, as the engine reports them.", []string{"instance"}, nil)
	descKVBytes = prometheus.NewDesc("duet_engine_kv_cache_bytes",
		"KV cache memory an instance holds: its sequences' caches and its prefix cache.", []string{"instance"}, nil)
	descKVCapacity = prometheus.NewDesc("duet_engine_kv_cache_capacity_bytes",
		"KV cache memory an instance may use.", []string{"instance"}, nil)
	descPrefixHits = prometheus.NewDesc("duet_prefix_cache_hits_total",
		"Prefix cache lookups that found a prefix.", []string{"instance"}, nil)
	descPrefixMisses = prometheus.NewDesc("duet_prefix_cache_misses_total",
		"Prefix cache lookups that found nothing.", []string{"instance"}, nil)
	descPrefixHitTokens = prometheus.NewDesc("duet_prefix_cache_hit_tokens_total",
		"Prompt tokens the prefix cache supplied.", []string{"instance"}, nil)
	descPrefixEvictions = prometheus.NewDesc("duet_prefix_cache_evictions_total",
		"Prefix cache entries evicted.", []string{"instance"}, nil)
	descPrefixBytes = prometheus.NewDesc("duet_prefix_cache_bytes",
		"Memory the prefix cache holds.", []string{"instance"}, nil)
	descEngineMetric = prometheus.NewDesc("duet_engine_metric",
		"The engine's own figures (engine.Stats.Metrics), by name, as the engine reports them (at most 64 names).", []string{"name"}, nil)
	descAdmissionInFlight = prometheus.NewDesc("duet_admission_in_flight",
		"Generations holding an admission slot now.", nil, nil)
	descAdmissionQueued = prometheus.NewDesc("duet_admission_queue_depth",
		"Generations waiting for an admission slot now.", nil, nil)
	descAdmissionMaxInFlight = prometheus.NewDesc("duet_admission_max_in_flight",
		"Admission slots (--max-in-flight).", nil, nil)
	descAdmissionMaxQueue = prometheus.NewDesc("duet_admission_max_queue",
		"Generations that may wait for a slot (--max-queue).", nil, nil)
	descMembers = prometheus.NewDesc("duet_cluster_members",
		"The cluster's members as this node sees them, by status (alive, leaving, left, failed).", []string{"status"}, nil)
	descInstances = prometheus.NewDesc("duet_cluster_instances",
		"The cluster's instances as this node sees them, by status.", []string{"status"}, nil)
	descPluginUp = prometheus.NewDesc("duet_plugin_up",
		"1 when a supervised plugin is running.", []string{"plugin"}, nil)
	descPluginRestarts = prometheus.NewDesc("duet_plugin_restarts_total",
		"Times the gateway restarted a plugin after it died.", []string{"plugin"}, nil)
)

// stateCollector reads the state series from Sources at each scrape (the engine's through statsCache).
type stateCollector struct{ m *Metrics }

func (s *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInstanceInFlight, descEngineUp, descEngineInFlight, descEngineQueued,
		descKVBytes, descKVCapacity, descPrefixHits, descPrefixMisses, descPrefixHitTokens, descPrefixEvictions,
		descPrefixBytes, descEngineMetric, descAdmissionInFlight, descAdmissionQueued, descAdmissionMaxInFlight,
		descAdmissionMaxQueue, descMembers, descInstances, descPluginUp, descPluginRestarts} {
		ch <- d
	}
}

func (s *stateCollector) Collect(ch chan<- prometheus.Metric) {
	src := s.m.src
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if src.Instances != nil {
		for _, in := range src.Instances() {
			gauge(descInstanceInFlight, float64(in.InFlight), in.ID, in.Model)
		}
	}
	if src.EngineStats != nil {
		st, err := s.m.stats.get()
		if err != nil {
			gauge(descEngineUp, 0)
		} else {
			gauge(descEngineUp, 1)
			for _, in := range st.Instances {
				if !s.m.ownInstance(in.InstanceID) {
					continue // only this node's instances label series
				}
				id := in.InstanceID
				gauge(descEngineInFlight, float64(in.InFlight), id)
				gauge(descEngineQueued, float64(in.Queued), id)
				gauge(descKVBytes, float64(in.KVBytes), id)
				gauge(descKVCapacity, float64(in.KVCapacityBytes), id)
				pc := in.PrefixCache
				counter(descPrefixHits, float64(pc.Hits), id)
				counter(descPrefixMisses, float64(pc.Misses), id)
				counter(descPrefixHitTokens, float64(pc.HitTokens), id)
				counter(descPrefixEvictions, float64(pc.Evictions), id)
				gauge(descPrefixBytes, float64(pc.Bytes), id)
			}
			names := make([]string, 0, len(st.Metrics))
			for k := range st.Metrics {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names[:min(len(names), maxEngineMetrics)] {
				gauge(descEngineMetric, st.Metrics[k], k)
			}
		}
	}
	if src.Admission != nil {
		a := src.Admission()
		gauge(descAdmissionInFlight, float64(a.InFlight))
		gauge(descAdmissionQueued, float64(a.Queued))
		gauge(descAdmissionMaxInFlight, float64(a.MaxInFlight))
		gauge(descAdmissionMaxQueue, float64(a.MaxQueue))
	}
	if src.Cluster != nil {
		members, instances := src.Cluster()
		for st, n := range members {
			gauge(descMembers, float64(n), st)
		}
		for st, n := range instances {
			gauge(descInstances, float64(n), st)
		}
	}
	if src.Plugins != nil {
		for _, p := range src.Plugins() {
			up := 0.0
			if p.Running {
				up = 1
			}
			gauge(descPluginUp, up, p.Name)
			counter(descPluginRestarts, float64(p.Restarts), p.Name)
		}
	}
}

// ownInstance says whether id is one of this node's instances (the engine's Stats might name others: a
// third-party engine's bookkeeping is not bounded by the gateway).
func (m *Metrics) ownInstance(id string) bool {
	if m.src.Instances == nil {
		return true
	}
	for _, in := range m.src.Instances() {
		if in.ID == id {
			return true
		}
	}
	return false
}

// StatsCalls is how many times the engine's Stats was called, for tests of the polling bound.
func (m *Metrics) StatsCalls() int {
	m.stats.mu.Lock()
	defer m.stats.mu.Unlock()
	return m.stats.calls
}
