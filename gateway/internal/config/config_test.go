package config

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte("# comment\nk3\n\n k4 \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c Config)
		err   string
	}{
		{name: "defaults", check: func(t *testing.T, c Config) {
			if c.Server.HopIdleTimeout != 15*time.Second {
				t.Errorf("HopIdleTimeout %s, want 15s", c.Server.HopIdleTimeout)
			}
			if c.Server.TokenizeMinBytes != 1024 { // as docs/configuration.md's flag table says
				t.Errorf("TokenizeMinBytes %d, want 1024", c.Server.TokenizeMinBytes)
			}
			if c.Server.Listen != "127.0.0.1:8000" || len(c.Models) != 1 || c.Models[0] != DefaultModel || c.Engine != DefaultEngine || len(c.Server.APIKeys) != 0 {
				t.Errorf("%+v", c)
			}
		}},
		{name: "env", env: map[string]string{"DUET_LISTEN": ":9", "DUET_MODEL": "m", "DUET_API_KEY": "a, b", "DUET_REQUEST_TIMEOUT": "5s", "DUET_MAX_INFLIGHT": "3"},
			check: func(t *testing.T, c Config) {
				if c.Server.Listen != ":9" || len(c.Models) != 1 || c.Models[0] != "m" || !reflect.DeepEqual(c.Server.APIKeys, []string{"a", "b"}) ||
					c.Server.RequestTimeout != 5*time.Second || c.Server.MaxInFlight != 3 {
					t.Errorf("%+v", c)
				}
			}},
		{name: "tokenize min bytes", args: []string{"--tokenize-min-bytes", "0"}, check: func(t *testing.T, c Config) {
			if c.Server.TokenizeMinBytes != 0 {
				t.Errorf("TokenizeMinBytes %d, want the flag's 0", c.Server.TokenizeMinBytes)
			}
		}},
		{name: "flag beats env", args: []string{"--listen", ":10", "--max-inflight", "7"}, env: map[string]string{"DUET_LISTEN": ":9", "DUET_MAX_INFLIGHT": "3"},
			check: func(t *testing.T, c Config) {
				if c.Server.Listen != ":10" || c.Server.MaxInFlight != 7 {
					t.Errorf("%+v", c)
				}
			}},
		{name: "key file and engine options", args: []string{"--api-key", "k1", "--api-key-file", keyFile, "--engine-opt", "a=1, b=x=y"},
			check: func(t *testing.T, c Config) {
				if !reflect.DeepEqual(c.Server.APIKeys, []string{"k1", "k3", "k4"}) || !reflect.DeepEqual(c.EngineOptions, map[string]string{"a": "1", "b": "x=y"}) {
					t.Errorf("%+v %+v", c.Server.APIKeys, c.EngineOptions)
				}
			}},
		{name: "model aliases", args: []string{"--model-alias", "claude-opus-5-5=embedded", "--model-alias", "claude-haiku-5-5=embedded"},
			env: map[string]string{"DUET_MODEL_ALIAS": "gpt-5-codex=embedded"},
			check: func(t *testing.T, c Config) {
				want := map[string]string{"claude-opus-5-5": "embedded", "claude-haiku-5-5": "embedded"}
				if !reflect.DeepEqual(c.Server.ModelAliases, want) {
					t.Errorf("ModelAliases %v, want the flags' %v", c.Server.ModelAliases, want)
				}
			}},
		{name: "model aliases from env", env: map[string]string{"DUET_MODEL_ALIAS": "a=m, b=m"},
			check: func(t *testing.T, c Config) {
				if !reflect.DeepEqual(c.Server.ModelAliases, map[string]string{"a": "m", "b": "m"}) {
					t.Errorf("ModelAliases %v", c.Server.ModelAliases)
				}
			}},
		{name: "a model alias without a model", args: []string{"--model-alias", "claude"}, err: "want NAME=MODEL"},
		{name: "a chain of model aliases", args: []string{"--model-alias", "a=b", "--model-alias", "b=m"}, err: "is an alias too"},
		{name: "hop idle timeout", args: []string{"--hop-idle-timeout", "3s"}, check: func(t *testing.T, c Config) {
			if c.Server.HopIdleTimeout != 3*time.Second {
				t.Errorf("HopIdleTimeout %s", c.Server.HopIdleTimeout)
			}
		}},
		{name: "hop idle timeout from env, 0: none", env: map[string]string{"DUET_HOP_IDLE_TIMEOUT": "0s"}, check: func(t *testing.T, c Config) {
			if c.Server.HopIdleTimeout != 0 {
				t.Errorf("HopIdleTimeout %s", c.Server.HopIdleTimeout)
			}
		}},
		{name: "hop idle timeout too short for keep-alives", args: []string{"--hop-idle-timeout", "500ms"}, err: "--hop-idle-timeout"},
		{name: "bad env duration", env: map[string]string{"DUET_REQUEST_TIMEOUT": "soon"}, err: "DUET_REQUEST_TIMEOUT"},
		{name: "bad env int", env: map[string]string{"DUET_BODY_LIMIT": "big"}, err: "DUET_BODY_LIMIT"},
		{name: "bad option", args: []string{"--engine-opt", "novalue"}, err: "key=value"},
		{name: "missing key file", args: []string{"--api-key-file", "/nonexistent"}, err: "API key file"},
		{name: "negative body limit", args: []string{"--body-limit", "-1"}, err: "--body-limit"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, err: "--log-format"},
		{name: "hosted tools dropped by default", check: func(t *testing.T, c Config) {
			if c.Server.HostedTools != "drop" {
				t.Errorf("HostedTools %q", c.Server.HostedTools)
			}
		}},
		{name: "hosted tools an error, from env", env: map[string]string{"DUET_HOSTED_TOOLS": "error"}, check: func(t *testing.T, c Config) {
			if c.Server.HostedTools != "error" {
				t.Errorf("HostedTools %q", c.Server.HostedTools)
			}
		}},
		{name: "hosted tools: flag beats env", args: []string{"--hosted-tools", "drop"}, env: map[string]string{"DUET_HOSTED_TOOLS": "error"}, check: func(t *testing.T, c Config) {
			if c.Server.HostedTools != "drop" {
				t.Errorf("HostedTools %q", c.Server.HostedTools)
			}
		}},
		{name: "bad hosted tools", args: []string{"--hosted-tools", "run"}, err: "--hosted-tools"},
		{name: "stray argument", args: []string{"serve"}, err: "unexpected"},
		{name: "plugin checksums", args: []string{"--engine-sha256", strings.Repeat("ab", 32)}, env: map[string]string{"DUET_ROUTER_SHA256": strings.Repeat("0F", 32)},
			check: func(t *testing.T, c Config) {
				if len(c.EngineSHA256) != 32 || c.EngineSHA256[0] != 0xab || len(c.RouterSHA256) != 32 || c.RouterSHA256[31] != 0x0f {
					t.Errorf("%x %x", c.EngineSHA256, c.RouterSHA256)
				}
			}},
		{name: "router subprocess", env: map[string]string{"DUET_ROUTER_SUBPROCESS": "true"},
			check: func(t *testing.T, c Config) {
				if !c.RouterSubprocess {
					t.Error("DUET_ROUTER_SUBPROCESS=true did not set RouterSubprocess")
				}
			}},
		{name: "ollama listener", args: []string{"--ollama-listen", "127.0.0.1:11434"},
			check: func(t *testing.T, c Config) {
				if c.OllamaListen != "127.0.0.1:11434" {
					t.Errorf("OllamaListen %q", c.OllamaListen)
				}
			}},
		{name: "ollama listener from env", env: map[string]string{"DUET_OLLAMA_LISTEN": ":11434"},
			check: func(t *testing.T, c Config) {
				if c.OllamaListen != ":11434" {
					t.Errorf("OllamaListen %q", c.OllamaListen)
				}
			}},
		{name: "ollama listener off by default", check: func(t *testing.T, c Config) {
			if c.OllamaListen != "" {
				t.Errorf("OllamaListen %q", c.OllamaListen)
			}
		}},
		{name: "ollama listener without a port", args: []string{"--ollama-listen", "localhost"}, err: "--ollama-listen"},
		{name: "ollama listener on the API's address", args: []string{"--listen", "127.0.0.1:9000", "--ollama-listen", "127.0.0.1:9000"}, err: "--ollama-listen"},
		{name: "metrics listener", env: map[string]string{"DUET_METRICS_LISTEN": "127.0.0.1:9464", "DUET_METRICS_STATS_INTERVAL": "5s"},
			check: func(t *testing.T, c Config) {
				if c.MetricsListen != "127.0.0.1:9464" || c.MetricsStatsInterval != 5*time.Second || c.NoMetrics {
					t.Errorf("MetricsListen %q, MetricsStatsInterval %s, NoMetrics %v", c.MetricsListen, c.MetricsStatsInterval, c.NoMetrics)
				}
			}},
		{name: "metrics on by default", check: func(t *testing.T, c Config) {
			if c.NoMetrics || c.MetricsListen != "" || c.MetricsStatsInterval != time.Second {
				t.Errorf("NoMetrics %v, MetricsListen %q, MetricsStatsInterval %s", c.NoMetrics, c.MetricsListen, c.MetricsStatsInterval)
			}
		}},
		{name: "metrics off", args: []string{"--no-metrics"}, check: func(t *testing.T, c Config) {
			if !c.NoMetrics {
				t.Error("--no-metrics did not set NoMetrics")
			}
		}},
		{name: "metrics listener without a port", args: []string{"--metrics-listen", "localhost"}, err: "--metrics-listen"},
		{name: "metrics listener on the API's address", args: []string{"--listen", "127.0.0.1:9000", "--metrics-listen", "127.0.0.1:9000"}, err: "--metrics-listen"},
		{name: "metrics listener without metrics", args: []string{"--no-metrics", "--metrics-listen", "127.0.0.1:9464"}, err: "--no-metrics"},
		{name: "stats interval zero", args: []string{"--metrics-stats-interval", "0s"}, err: "--metrics-stats-interval"},
		{name: "pd auto", args: []string{"--pd", "auto"}, check: func(t *testing.T, c Config) {
			if c.PD != PDAuto || c.CalibrateTokens != DefaultCalibrateTokens || c.EngineOptions["remote_prefill_threshold"] != "256" {
				t.Errorf("PD %q, CalibrateTokens %d, engine options %v", c.PD, c.CalibrateTokens, c.EngineOptions)
			}
		}},
		{name: "pd auto keeps a given engine threshold and calibration", args: []string{"--pd", "auto", "--engine-opt", "remote_prefill_threshold=600"},
			env: map[string]string{"DUET_PD_CALIBRATE_TOKENS": "0"},
			check: func(t *testing.T, c Config) {
				if c.CalibrateTokens != 0 || c.EngineOptions["remote_prefill_threshold"] != "600" {
					t.Errorf("CalibrateTokens %d, engine options %v", c.CalibrateTokens, c.EngineOptions)
				}
			}},
		{name: "pd by default", check: func(t *testing.T, c Config) {
			if c.PD != "" || c.CalibrateTokens != 0 || c.EngineOptions["remote_prefill_threshold"] != "" {
				t.Errorf("PD %q, CalibrateTokens %d, engine options %v", c.PD, c.CalibrateTokens, c.EngineOptions)
			}
		}},
		{name: "unknown pd mode", args: []string{"--pd", "smart"}, err: "--pd"},
		{name: "negative calibration", args: []string{"--pd-calibrate-tokens", "-1"}, err: "pd-calibrate-tokens"},
		{name: "huge calibration", env: map[string]string{"DUET_PD_CALIBRATE_TOKENS": "1000000"}, err: "--pd-calibrate-tokens"},
		{name: "short checksum", args: []string{"--engine-sha256", "abcd"}, err: "64 hex digits"},
		{name: "not hex", args: []string{"--router-sha256", strings.Repeat("zz", 32)}, err: "--router-sha256"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := Parse(c.args, func(k string) string { return c.env[k] }, io.Discard)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, want an error mentioning %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, cfg)
		})
	}
}
