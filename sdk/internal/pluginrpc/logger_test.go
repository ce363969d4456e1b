package pluginrpc

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// TestLoggerShape: a record comes out as the JSON line go-plugin's host parses (its timestamp layout, lower-case
// level), with durations and integers as the host will print them.
func TestLoggerShape(t *testing.T) {
	var buf bytes.Buffer
	newLogger(&buf, slog.LevelInfo).Info("model loaded", "took", 1500*time.Millisecond, "n", 3)
	newLogger(&buf, slog.LevelInfo).Debug("hidden")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	ts, _ := rec["@timestamp"].(string)
	if _, err := time.Parse(hostTimeLayout, ts); err != nil || len(ts) != len("2006-01-02T15:04:05.000000Z") {
		t.Errorf("@timestamp %q does not parse with go-plugin's layout: %v", ts, err)
	}
	if rec["@level"] != "info" || rec["@message"] != "model loaded" || rec["took"] != "1.5s" || rec["n"] != "3" {
		t.Errorf("record %v", rec)
	}
}
