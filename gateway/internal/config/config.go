// Package config parses the duet command line and its environment equivalents into one Config. A flag wins
// over its environment variable, which wins over the default.
package config

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/duet-ai/duet/gateway/internal/alias"
	"github.com/duet-ai/duet/gateway/internal/responses"
	"github.com/duet-ai/duet/gateway/internal/server"
)

// Config is everything the duet binary is told.
type Config struct {
	Server server.Config
	// Models are the models this node's engine loads at start, one instance each (directories or model ids).
	Models []string
	// Engine and Router are built-in plugin names or paths to plugin binaries.
	Engine, Router string
	// EngineSHA256 and RouterSHA256, when set, pin the SHA-256 of an external plugin binary: the gateway checks
	// it before every start (go-plugin's SecureConfig), so a replaced binary is refused.
	EngineSHA256, RouterSHA256 []byte
	// PluginDir, when set, holds executables registered as plugins at start, each by its file name and pinned
	// by its SHA-256 then: with the built-ins and the --engine/--router paths, the only plugins that a
	// request (PUT /admin/v1/router) may name.
	PluginDir string
	// MaxInstances bounds the instances this node serves; loads over the API past it are refused.
	MaxInstances int
	// RouterSubprocess runs a built-in router as a plugin subprocess, like an external one, instead of in the
	// gateway's process.
	RouterSubprocess bool
	// EngineOptions are passed to the engine's Load.
	EngineOptions map[string]string
	// PD is how the built-in router decides where long prompts are prefilled: "threshold" (exo's rule) or
	// "auto" (by estimated time from measured speeds); empty leaves the router's own setting
	// (DUET_DISAGG_PD). CalibrateTokens is the length of the calibration run after each model load (0: none;
	// by default 512 with --pd auto and none otherwise).
	PD              string
	CalibrateTokens int
	// NodeID is this node's id in the cluster; empty: the one kept in DataDir (created on first start).
	NodeID  string
	DataDir string
	// Cluster membership: the gossip address (ClusterBindSet says it was given), what peers dial, how peers
	// reach this API, whom to join, the secret file, the hardware class advertised.
	ClusterBind, ClusterAdvertise, APIAdvertise string
	ClusterBindSet                              bool
	Join                                        []string
	SecretFile                                  string
	Hardware                                    string
	// TLSCert and TLSKey, when set, are the PEM files the API is served with over TLS.
	TLSCert, TLSKey string
	LogLevel        string
	LogFormat       string

	// OllamaListen, when set, is a second address the same API is served on: Ollama's own port
	// (127.0.0.1:11434), where apps that speak Ollama look for it without being told.
	OllamaListen string

	// NoMetrics turns the Prometheus series off (GET /metrics then answers 404, and nothing is counted).
	NoMetrics bool
	// MetricsListen, when set, is an address that serves GET /metrics alone, without an API key: for a
	// scraper on a private network.
	MetricsListen string
	// MetricsStatsInterval bounds how often the engine's Stats are read for /metrics, however often it is
	// scraped.
	MetricsStatsInterval time.Duration
	// OTLPEndpoint, when set, is an OTLP/HTTP collector that gets each request's spans (the standard
	// OTEL_EXPORTER_OTLP_ENDPOINT works too).
	OTLPEndpoint string
}

// Defaults used when neither flag nor environment says otherwise.
const (
	DefaultEngine = "mlx-engine"
	DefaultModel  = "embedded"
	DefaultRouter = "router-disagg"
	// DefaultMaxInstances bounds a node's instances unless --max-instances says otherwise.
	DefaultMaxInstances = 8
)

// Parse reads args (without the program name) and the environment through getenv.
func Parse(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	c := Config{Server: server.DefaultConfig(), EngineOptions: map[string]string{}, MetricsStatsInterval: time.Second,
		MaxInstances: DefaultMaxInstances}
	fs := flag.NewFlagSet("duet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "duet: an OpenAI-compatible LLM gateway that splits prefill and decode across machines.\n\n")
		fmt.Fprintf(stderr, "Usage: duet [flags]\n\nEvery flag has an environment equivalent, shown in brackets.\n\n")
		fs.PrintDefaults()
	}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	var apiKey, apiKeyFile, adminKey, engineOpts, prefill, engineSum, routerSum, join, models string
	var envErrs []error
	intVar := func(p *int, name, envName, usage string) {
		fs.Func(name, fmt.Sprintf("%s [%s] (default %d)", usage, envName, *p), func(s string) error {
			_, err := fmt.Sscan(s, p)
			return err
		})
		if v := getenv(envName); v != "" {
			if _, err := fmt.Sscan(v, p); err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: not an integer", envName, v))
			}
		}
	}
	int64Var := func(p *int64, name, envName, usage string) {
		fs.Func(name, fmt.Sprintf("%s [%s] (default %d)", usage, envName, *p), func(s string) error {
			_, err := fmt.Sscan(s, p)
			return err
		})
		if v := getenv(envName); v != "" {
			if _, err := fmt.Sscan(v, p); err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: not an integer", envName, v))
			}
		}
	}
	durationVar := func(p *time.Duration, name, envName, usage string) {
		fs.Func(name, fmt.Sprintf("%s [%s] (default %s)", usage, envName, *p), func(s string) error {
			d, err := time.ParseDuration(s)
			*p = d
			return err
		})
		if v := getenv(envName); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				envErrs = append(envErrs, fmt.Errorf("%s=%q: not a duration (e.g. 30s, 5m)", envName, v))
			}
			*p = d
		}
	}
	fs.StringVar(&c.Server.Listen, "listen", env("DUET_LISTEN", c.Server.Listen), "address to serve the API on [DUET_LISTEN]")
	models = env("DUET_MODEL", "")
	modelFlag := false
	fs.Func("model", "model to serve: embedded, a local directory or a model id; repeat for several instances [DUET_MODEL, comma-separated] (default embedded)", func(v string) error {
		if !modelFlag {
			models, modelFlag = "", true
		}
		if models != "" {
			models += ","
		}
		models += v
		return nil
	})
	var aliases []string
	if v := getenv("DUET_MODEL_ALIAS"); v != "" {
		aliases = splitList(v)
	}
	aliasFlag := false
	fs.Func("model-alias", "NAME=MODEL: answer requests for model NAME (an agent's default, say claude-opus-5-5) with served model MODEL; repeat for several [DUET_MODEL_ALIAS, comma-separated]", func(v string) error {
		if !aliasFlag {
			aliases, aliasFlag = nil, true
		}
		aliases = append(aliases, v)
		return nil
	})
	fs.StringVar(&adminKey, "admin-key", env("DUET_ADMIN_KEY", ""), "key the cluster API's writes need (loading models, instance links, the router); comma-separated for several; without one an API key suffices, from loopback clients only unless --allow-remote-admin [DUET_ADMIN_KEY]")
	fs.BoolVar(&c.Server.AllowRemoteAdmin, "allow-remote-admin", env("DUET_ALLOW_REMOTE_ADMIN", "") == "true", "without --admin-key, take the cluster API's writes from clients beyond loopback too (by default only this machine may make them: protected mode) [DUET_ALLOW_REMOTE_ADMIN]")
	home, _ := os.UserHomeDir()
	fs.StringVar(&c.DataDir, "data-dir", env("DUET_DATA_DIR", filepath.Join(home, ".duet")), "where the node keeps its id, keyring and membership snapshot [DUET_DATA_DIR]")
	fs.StringVar(&c.ClusterBind, "cluster-bind", env("DUET_CLUSTER_BIND", ""), "gossip address host:port (default: the --listen host, port 7946) [DUET_CLUSTER_BIND]")
	fs.StringVar(&c.ClusterAdvertise, "cluster-advertise", env("DUET_CLUSTER_ADVERTISE", ""), "gossip address peers dial, when not --cluster-bind's [DUET_CLUSTER_ADVERTISE]")
	fs.StringVar(&c.APIAdvertise, "api-advertise", env("DUET_API_ADVERTISE", ""), "API address peers forward requests to (default: --listen; for 0.0.0.0 the best address of this machine) [DUET_API_ADVERTISE]")
	fs.StringVar(&join, "join", env("DUET_JOIN", ""), "gossip addresses of peers to join, comma-separated (host or host:port); retried in the background [DUET_JOIN]")
	fs.StringVar(&c.SecretFile, "cluster-secret-file", env("DUET_CLUSTER_SECRET_FILE", ""), "file with the cluster secret (one per line, current first, for rotation); or set DUET_CLUSTER_SECRET [DUET_CLUSTER_SECRET_FILE]")
	fs.StringVar(&c.Hardware, "hardware", env("DUET_HARDWARE", ""), "hardware class to advertise, e.g. m3-ultra (default: detected) [DUET_HARDWARE]")
	fs.Func("hosted-tools", "what /v1/responses does with OpenAI's hosted tools (web_search, file_search, ...), which duet cannot run: drop (leave them out of what the model sees, and say so in the response) or error (a 400) [DUET_HOSTED_TOOLS] (default drop)", func(v string) error {
		c.Server.HostedTools = responses.HostedTools(v)
		return nil
	})
	if v := getenv("DUET_HOSTED_TOOLS"); v != "" {
		c.Server.HostedTools = responses.HostedTools(v)
	}
	intVar(&c.Server.TokenizeMinBytes, "tokenize-min-bytes", "DUET_TOKENIZE_MIN_BYTES", "prompts of at least this many bytes are tokenized for the router; shorter ones are estimated")
	fs.StringVar(&apiKey, "api-key", env("DUET_API_KEY", ""), "API key clients must send as a Bearer token; comma-separated for several [DUET_API_KEY]")
	fs.StringVar(&apiKeyFile, "api-key-file", env("DUET_API_KEY_FILE", ""), "file with one API key per line [DUET_API_KEY_FILE]")
	fs.StringVar(&c.Engine, "engine", env("DUET_ENGINE", DefaultEngine), "engine plugin: a built-in name, a file of --plugin-dir or a path to a plugin binary (pinned by its SHA-256 at start) [DUET_ENGINE]")
	fs.StringVar(&engineOpts, "engine-opt", env("DUET_ENGINE_OPTS", ""), "engine load options, comma-separated key=value pairs [DUET_ENGINE_OPTS]")
	fs.StringVar(&prefill, "prefill", env("DUET_PREFILL", ""), "KV wire endpoints (host:port, comma-separated, in order) of engines that prefill long prompts for this gateway's instances, until cluster routing provides them [DUET_PREFILL]")
	fs.StringVar(&engineSum, "engine-sha256", env("DUET_ENGINE_SHA256", ""), "SHA-256 (hex) the engine plugin binary must have; checked before every start [DUET_ENGINE_SHA256]")
	fs.StringVar(&routerSum, "router-sha256", env("DUET_ROUTER_SHA256", ""), "SHA-256 (hex) the router plugin binary must have; checked before every start [DUET_ROUTER_SHA256]")
	fs.BoolVar(&c.RouterSubprocess, "router-subprocess", env("DUET_ROUTER_SUBPROCESS", "") == "true", "run a built-in router as a plugin subprocess rather than in the gateway's process [DUET_ROUTER_SUBPROCESS]")
	fs.StringVar(&c.PluginDir, "plugin-dir", env("DUET_PLUGIN_DIR", ""), "directory of plugin executables a router swap (PUT /admin/v1/router) may name, by file name; each is pinned by its SHA-256 at start [DUET_PLUGIN_DIR]")
	fs.StringVar(&c.Server.ModelsDir, "models-dir", env("DUET_MODELS_DIR", ""), "directory under which a load over the API (POST /v1/instances) may name a local model directory; without it the API loads only Hugging Face ids, embedded and the --model models [DUET_MODELS_DIR]")
	intVar(&c.MaxInstances, "max-instances", "DUET_MAX_INSTANCES", "instances this node serves at most, --model ones included; loads over the API past it are refused")
	fs.StringVar(&c.Router, "router", env("DUET_ROUTER", DefaultRouter), "router plugin: a built-in name, a file of --plugin-dir or a path to a plugin binary (pinned by its SHA-256 at start) [DUET_ROUTER]")
	fs.StringVar(&c.PD, "pd", env("DUET_PD", ""), "where long prompts are prefilled: threshold (remote from 1000 uncached tokens, as exo) or auto (by estimated time from measured speeds) [DUET_PD]")
	calibrate := -1 // unset: by --pd
	calibrateSet := func(s string) error {
		if _, err := fmt.Sscan(s, &calibrate); err != nil || calibrate < 0 {
			return fmt.Errorf("want a count ≥ 0")
		}
		return nil
	}
	fs.Func("pd-calibrate-tokens", "prompt tokens of the calibration run after each model load, which seeds its measured speeds; 0: none (default 512 with --pd auto, else 0) [DUET_PD_CALIBRATE_TOKENS]", calibrateSet)
	if v := getenv("DUET_PD_CALIBRATE_TOKENS"); v != "" {
		if err := calibrateSet(v); err != nil {
			envErrs = append(envErrs, fmt.Errorf("DUET_PD_CALIBRATE_TOKENS=%q: %v", v, err))
		}
	}
	fs.StringVar(&c.NodeID, "node-id", env("DUET_NODE_ID", ""), "this gateway's node id in the cluster (default: one created once and kept in --data-dir) [DUET_NODE_ID]")
	fs.StringVar(&c.OllamaListen, "ollama-listen", env("DUET_OLLAMA_LISTEN", ""), "a second address to serve the API on, e.g. Ollama's 127.0.0.1:11434, where Ollama apps find /api without a setting (TLS as --listen) [DUET_OLLAMA_LISTEN]")
	fs.StringVar(&c.TLSCert, "tls-cert", env("DUET_TLS_CERT", ""), "PEM certificate (chain) to serve the API over TLS; needs --tls-key [DUET_TLS_CERT]")
	fs.StringVar(&c.TLSKey, "tls-key", env("DUET_TLS_KEY", ""), "PEM private key of --tls-cert [DUET_TLS_KEY]")
	fs.StringVar(&c.LogLevel, "log-level", env("DUET_LOG_LEVEL", "info"), "log level: debug, info, warn, error [DUET_LOG_LEVEL]")
	fs.StringVar(&c.LogFormat, "log-format", env("DUET_LOG_FORMAT", "text"), "log format: text or json [DUET_LOG_FORMAT]")
	intVar(&c.Server.BodyLimit, "body-limit", "DUET_BODY_LIMIT", "maximum request body in bytes")
	int64Var(&c.Server.MaxBodyBytesInFlight, "max-inflight-body-bytes", "DUET_MAX_INFLIGHT_BODY_BYTES", "request body bytes the gateway holds at once; larger bodies wait their turn")
	intVar(&c.Server.MaxHeaderBytes, "max-header-bytes", "DUET_MAX_HEADER_BYTES", "maximum size of a request's headers in bytes, request line included")
	intVar(&c.Server.MaxInFlight, "max-inflight", "DUET_MAX_INFLIGHT", "generations running at once")
	intVar(&c.Server.MaxQueue, "max-queue", "DUET_MAX_QUEUE", "generations waiting for a slot before 429")
	fs.BoolVar(&c.NoMetrics, "no-metrics", env("DUET_NO_METRICS", "") == "true", "count nothing and serve no /metrics [DUET_NO_METRICS]")
	fs.StringVar(&c.MetricsListen, "metrics-listen", env("DUET_METRICS_LISTEN", ""), "an address that serves GET /metrics alone, without an API key (the API port serves it behind the API key) [DUET_METRICS_LISTEN]")
	fs.StringVar(&c.OTLPEndpoint, "otlp-endpoint", env("DUET_OTLP_ENDPOINT", ""), "an OTLP/HTTP collector (http://host:4318) to export each request's spans to; OTEL_EXPORTER_OTLP_ENDPOINT works too [DUET_OTLP_ENDPOINT]")
	durationVar(&c.MetricsStatsInterval, "metrics-stats-interval", "DUET_METRICS_STATS_INTERVAL", "shortest interval between two reads of the engine's stats for /metrics")
	durationVar(&c.Server.RequestTimeout, "request-timeout", "DUET_REQUEST_TIMEOUT", "longest a generation may run")
	durationVar(&c.Server.HopIdleTimeout, "hop-idle-timeout", "DUET_HOP_IDLE_TIMEOUT", "longest a request forwarded to another gateway waits for a sign of life from it before it fails over (or, mid-answer, ends with an error); 0: no bound but --request-timeout")
	durationVar(&c.Server.QueueTimeout, "queue-timeout", "DUET_QUEUE_TIMEOUT", "longest a request waits for a slot")
	durationVar(&c.Server.ReadTimeout, "read-timeout", "DUET_READ_TIMEOUT", "longest reading a request may take")
	durationVar(&c.Server.WriteTimeout, "write-timeout", "DUET_WRITE_TIMEOUT", "longest one response write may take")
	durationVar(&c.Server.IdleTimeout, "idle-timeout", "DUET_IDLE_TIMEOUT", "longest an idle keep-alive connection stays open")
	if err := errors.Join(envErrs...); err != nil {
		return c, err
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "cluster-bind" {
			c.ClusterBindSet = true
		}
	})
	if getenv("DUET_CLUSTER_BIND") != "" {
		c.ClusterBindSet = true
	}
	c.Models = splitList(models)
	if len(c.Models) == 0 {
		c.Models = []string{DefaultModel}
	}
	c.Server.OperatorModels = c.Models
	var err error
	if c.Server.ModelAliases, err = alias.Parse(aliases); err != nil {
		return c, err
	}
	c.Join = splitList(join)
	c.Server.AdminKeys = splitList(adminKey)
	for _, k := range strings.Split(apiKey, ",") {
		if k = strings.TrimSpace(k); k != "" {
			c.Server.APIKeys = append(c.Server.APIKeys, k)
		}
	}
	if apiKeyFile != "" {
		keys, err := readKeys(apiKeyFile)
		if err != nil {
			return c, err
		}
		c.Server.APIKeys = append(c.Server.APIKeys, keys...)
	}
	for _, ep := range strings.Split(prefill, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			if _, _, err := net.SplitHostPort(ep); err != nil {
				return c, fmt.Errorf("--prefill %q: %v", ep, err)
			}
			c.Server.PrefillEndpoints = append(c.Server.PrefillEndpoints, ep)
		}
	}
	if c.EngineSHA256, err = parseSHA256("--engine-sha256", engineSum); err != nil {
		return c, err
	}
	if c.RouterSHA256, err = parseSHA256("--router-sha256", routerSum); err != nil {
		return c, err
	}
	for _, kv := range strings.Split(engineOpts, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return c, fmt.Errorf("engine option %q: want key=value", kv)
		}
		c.EngineOptions[k] = v
	}
	c.CalibrateTokens = calibrate
	if calibrate < 0 {
		c.CalibrateTokens = 0
		if c.PD == PDAuto {
			c.CalibrateTokens = DefaultCalibrateTokens
		}
	}
	if _, set := c.EngineOptions["remote_prefill_threshold"]; c.PD == PDAuto && !set {
		// The router decides; the engine's own threshold (1000) would overrule it below. It stays to keep a
		// prompt the engine finds mostly cached local.
		c.EngineOptions["remote_prefill_threshold"] = "256"
	}
	return c, c.validate()
}

// PD modes and the calibration run's default length.
const (
	PDThreshold            = "threshold"
	PDAuto                 = "auto"
	DefaultCalibrateTokens = 512
)

func (c Config) validate() error {
	var errs []error
	if c.PD != "" && c.PD != PDThreshold && c.PD != PDAuto {
		errs = append(errs, fmt.Errorf("--pd %q: want %s or %s", c.PD, PDThreshold, PDAuto))
	}
	if c.CalibrateTokens > 1<<16 {
		errs = append(errs, fmt.Errorf("--pd-calibrate-tokens %d: at most %d", c.CalibrateTokens, 1<<16))
	}
	for _, m := range c.Models {
		if m == "" {
			errs = append(errs, errors.New("--model must not be empty"))
		}
	}
	if c.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if h := c.Server.HostedTools; h != responses.HostedToolsDrop && h != responses.HostedToolsError {
		errs = append(errs, fmt.Errorf("--hosted-tools %q: must be drop or error", h))
	}
	if c.Server.BodyLimit <= 0 {
		errs = append(errs, errors.New("--body-limit must be positive"))
	}
	if c.Server.MaxBodyBytesInFlight <= 0 {
		errs = append(errs, errors.New("--max-inflight-body-bytes must be positive"))
	}
	if c.Server.MaxHeaderBytes < 1024 {
		errs = append(errs, errors.New("--max-header-bytes must be at least 1024"))
	}
	if c.Server.MaxInFlight <= 0 || c.Server.MaxQueue < 0 {
		errs = append(errs, errors.New("--max-inflight must be positive and --max-queue not negative"))
	}
	if c.MaxInstances < 1 {
		errs = append(errs, errors.New("--max-instances must be at least 1"))
	}
	if c.Server.RequestTimeout <= 0 {
		errs = append(errs, errors.New("--request-timeout must be positive"))
	}
	if c.Server.HopIdleTimeout != 0 && c.Server.HopIdleTimeout < time.Second {
		errs = append(errs, fmt.Errorf("--hop-idle-timeout %s: 0 (none) or at least 1s (owners send a keep-alive every third of it)", c.Server.HopIdleTimeout))
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-listen %q: %v", c.MetricsListen, err))
		} else if c.MetricsListen == c.Server.Listen || c.MetricsListen == c.OllamaListen {
			errs = append(errs, fmt.Errorf("--metrics-listen %q is already the API's address; give another", c.MetricsListen))
		} else if c.NoMetrics {
			errs = append(errs, fmt.Errorf("--metrics-listen with --no-metrics: there would be nothing to serve"))
		}
	}
	if c.MetricsStatsInterval <= 0 {
		errs = append(errs, fmt.Errorf("--metrics-stats-interval %s: must be positive", c.MetricsStatsInterval))
	}
	if c.OllamaListen != "" {
		if _, _, err := net.SplitHostPort(c.OllamaListen); err != nil {
			errs = append(errs, fmt.Errorf("--ollama-listen %q: %v", c.OllamaListen, err))
		} else if c.OllamaListen == c.Server.Listen {
			errs = append(errs, fmt.Errorf("--ollama-listen %q is the --listen address; give another (Ollama's is 127.0.0.1:11434)", c.OllamaListen))
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("--log-format %q: want text or json", c.LogFormat))
	}
	return errors.Join(errs...)
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// parseSHA256 reads a hex SHA-256 as sha256sum prints it; empty means none.
func parseSHA256(flag, s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("%s %q: want the 64 hex digits of a SHA-256 (as sha256sum prints it)", flag, s)
	}
	return b, nil
}

func readKeys(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("API key file: %w", err)
	}
	defer f.Close()
	var keys []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			keys = append(keys, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("API key file: %w", err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("API key file %s holds no key", path)
	}
	return keys, nil
}
