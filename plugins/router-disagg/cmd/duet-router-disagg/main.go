// Command duet-router-disagg serves the P/D router as a duet router plugin:
//
//	duet --router ./duet-router-disagg
//
// It is configured by DUET_DISAGG_* environment variables (see plugins/router-disagg/README.md), which the
// gateway passes on to the plugin. A bad value stops it with a message naming the variable. With
// DUET_DISAGG_STATS_INTERVAL set (a Go duration such as 1m), it logs its routing counters and per-plugin
// latencies at that interval.
package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	routerdisagg "github.com/duet-ai/duet/plugins/router-disagg"
	"github.com/duet-ai/duet/sdk/router"
)

func main() {
	r, err := routerdisagg.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if v := os.Getenv(routerdisagg.EnvPrefix + "STATS_INTERVAL"); v != "" {
		every, err := time.ParseDuration(v)
		if err != nil || every <= 0 {
			fmt.Fprintf(os.Stderr, "router-disagg: %sSTATS_INTERVAL=%q: want a positive duration such as 1m\n", routerdisagg.EnvPrefix, v)
			os.Exit(1)
		}
		go func() {
			log := logger(os.Stderr)
			for range time.Tick(every) {
				logStats(r, log)
			}
		}()
	}
	router.Serve(r)
}

// logStats logs the router's counters: routes, affinity entries, and each plugin's mean time on timed routes.
func logStats(r *routerdisagg.Router, log *slog.Logger) {
	st := r.Stats()
	attrs := []any{"routes", st.Routes, "affinity_entries", st.AffinityEntries}
	for _, p := range st.Plugins {
		if p.Calls > 0 {
			attrs = append(attrs, string(p.Profile)+"."+string(p.Plugin), p.Mean().String())
		}
	}
	log.Info("router-disagg stats", attrs...)
}

// logger writes JSON lines to stderr in the shape go-plugin's host parses ("@level", "@message",
// "@timestamp"), so the gateway logs them under the plugin's name.
func logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch a.Key {
			case slog.TimeKey:
				a.Key = "@timestamp"
			case slog.LevelKey:
				a.Key = "@level"
				a.Value = slog.StringValue(strings.ToLower(a.Value.String()))
			case slog.MessageKey:
				a.Key = "@message"
			}
			return a
		},
	}))
}
