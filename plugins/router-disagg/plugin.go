package routerdisagg

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/duet-ai/duet/sdk/router"
)

// Plugin builds the router a plugin process serves: configured from the environment (DUET_DISAGG_*), and
// logging its counters every DUET_DISAGG_STATS_INTERVAL when that is set. The gateway's built-in
// "router-disagg" and cmd/duet-router-disagg both start here.
func Plugin() (*Router, error) {
	r, err := FromEnv()
	if err != nil {
		return nil, err
	}
	if v := os.Getenv(EnvPrefix + "STATS_INTERVAL"); v != "" {
		every, err := time.ParseDuration(v)
		if err != nil || every <= 0 {
			return nil, fmt.Errorf("router-disagg: %sSTATS_INTERVAL=%q: want a positive duration such as 1m", EnvPrefix, v)
		}
		go func() {
			log := router.Logger()
			for range time.Tick(every) {
				r.LogStats(log)
			}
		}()
	}
	return r, nil
}

// LogStats logs the router's counters: routes, affinity entries, each plugin's mean time on timed routes, and,
// for the plugins of snapshot scope, their mean time once per snapshot ("decode.load.per_snapshot").
func (r *Router) LogStats(log *slog.Logger) {
	st := r.Stats()
	attrs := []any{"routes", st.Routes, "affinity_entries", st.AffinityEntries}
	for _, p := range st.Plugins {
		name := string(p.Profile) + "." + string(p.Plugin)
		if p.Calls > 0 {
			attrs = append(attrs, name, p.Mean().String())
		}
		if p.Precomputed > 0 {
			attrs = append(attrs, name+".per_snapshot", p.PrecomputeMean().String())
		}
	}
	log.Info("router-disagg stats", attrs...)
}
