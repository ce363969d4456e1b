package routerdisagg

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/duet-ai/duet/sdk/router"
	"github.com/duet-ai/duet/sdk/routertest"
)

func TestLogStats(t *testing.T) {
	cfg := DefaultConfig()
	cfg.LatencySampleEvery = 1
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	snap := routertest.Cluster(2, routertest.Ready("d", "m", "n1", router.RoleDecode), routertest.Ready("p", "m", "n2", router.RolePrefill))
	if _, err := r.Route(context.Background(), router.Request{Model: "m", PromptTokens: 2000}, snap); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	r.LogStats(slog.New(slog.NewJSONHandler(&buf, nil)))
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	for _, k := range []string{"time", "level", "msg", "routes", "decode.ready", "decode.load", "prefill.link", "prefill.pick"} {
		if _, ok := rec[k]; !ok {
			t.Errorf("log record lacks %q: %s", k, buf.String())
		}
	}
	if rec["level"] != "INFO" || rec["routes"] != 1.0 {
		t.Errorf("record %v: want level info and 1 route", rec)
	}
}
