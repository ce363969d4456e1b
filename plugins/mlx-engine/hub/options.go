package hub

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultEndpoint is the hub huggingface_hub talks to unless HF_ENDPOINT says otherwise.
const DefaultEndpoint = "https://huggingface.co"

// DefaultInclude are the files a model directory needs: configuration, tokenizer and chat template files, and
// safetensors weights (single or sharded with model.safetensors.index.json), at the top level of the repository.
var DefaultInclude = []string{"*.json", "*.safetensors", "*.jinja"}

// DefaultExclude drops weights in formats the engine does not load, the duplicate Mistral-format weights
// (consolidated*.safetensors) and the original/ checkpoint folders some repositories carry.
var DefaultExclude = []string{
	"*.bin", "*.pth", "*.pt", "*.gguf", "*.msgpack", "*.h5", "*.onnx", "*.ckpt",
	"consolidated*.safetensors", "original/",
}

// Options configure Resolve. The zero value works: every field has a default, and the fields that
// huggingface_hub reads from the environment are read from the same variables here.
type Options struct {
	// Endpoint is the hub's base URL. Default: $HF_ENDPOINT, else DefaultEndpoint.
	Endpoint string
	// CacheDir is the hub cache. Default: $HF_HUB_CACHE, else $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, else
	// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub (huggingface_hub's order).
	CacheDir string
	// Token authenticates to the hub for gated and private repositories. Default: $HF_TOKEN, else
	// $HUGGING_FACE_HUB_TOKEN, else the file $HF_TOKEN_PATH, else $HF_HOME/token (what `huggingface-cli login`
	// writes). It is sent to the endpoint only, never to the storage host LFS files redirect to.
	Token string
	// Offline uses the cache only and makes no request. Also enabled by HF_HUB_OFFLINE=1 (or TRANSFORMERS_OFFLINE).
	Offline bool
	// Progress receives download events. Nil means a TextProgress on standard error (a bar on a terminal, log
	// lines otherwise); use Discard for silence.
	Progress Progress
	// ProgressInterval is how often progress events are sent while bytes flow. Default 200ms.
	ProgressInterval time.Duration
	// Client sends the requests. Default: a client with ConnectTimeout on dialing and TLS handshakes. Resolve
	// adds its own idle deadline and drops the Authorization header on redirects to another host either way.
	Client *http.Client
	// ConnectTimeout bounds dialing and the TLS handshake of the default client. Default 10s.
	ConnectTimeout time.Duration
	// IdleTimeout fails a request that receives nothing for this long: waiting for response headers or between
	// two reads of the body. A stalled transfer is retried and resumes where it stopped. There is no total
	// deadline: a 20 GB file takes what it takes. Default: $HF_HUB_DOWNLOAD_TIMEOUT seconds, else 30s.
	IdleTimeout time.Duration
	// Retries is how many times a request is retried after a transient failure (connection error, stall,
	// HTTP 408, 429 or 5xx) without any byte of progress in between. 0 means the default, 5; negative means none.
	Retries int
	// Backoff is the wait before the first retry; it doubles up to 30s (or the server's Retry-After). Default 1s.
	Backoff time.Duration
	// Concurrency is how many files download at once. Default 4.
	Concurrency int
	// Include selects the repository files to fetch, as path.Match patterns on the slash-separated path ("*"
	// does not cross "/"). Default DefaultInclude. With the default, a repository without config.json or
	// safetensors weights is refused with ErrNoModel.
	Include []string
	// Exclude drops files Include selected: a pattern without "/" is matched against the file's base name at any
	// depth, one ending in "/" drops that folder, any other is matched against the whole path. Default DefaultExclude.
	Exclude []string
	// Getenv reads the environment. Default os.Getenv; tests set it to run in parallel.
	Getenv func(string) string
}

// settings are Options with every default applied.
type settings struct {
	Options
	defaultFiles bool // Include was left to its default: check that a model is there
}

func (o Options) settle() settings {
	s := settings{Options: o}
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	home := hfHome(getenv)
	if s.Endpoint == "" {
		s.Endpoint = getenv("HF_ENDPOINT")
	}
	if s.Endpoint == "" {
		s.Endpoint = DefaultEndpoint
	}
	s.Endpoint = strings.TrimRight(s.Endpoint, "/")
	if s.CacheDir == "" {
		s.CacheDir = firstNonEmpty(expandHome(getenv("HF_HUB_CACHE"), getenv), expandHome(getenv("HUGGINGFACE_HUB_CACHE"), getenv))
	}
	if s.CacheDir == "" {
		s.CacheDir = filepath.Join(home, "hub")
	}
	if abs, err := filepath.Abs(s.CacheDir); err == nil {
		s.CacheDir = abs
	}
	if s.Token == "" {
		s.Token = strings.TrimSpace(firstNonEmpty(getenv("HF_TOKEN"), getenv("HUGGING_FACE_HUB_TOKEN")))
	}
	if s.Token == "" {
		path := expandHome(getenv("HF_TOKEN_PATH"), getenv)
		if path == "" {
			path = filepath.Join(home, "token")
		}
		if b, err := os.ReadFile(path); err == nil && len(b) < 4096 {
			s.Token = strings.TrimSpace(string(b))
		}
	}
	s.Offline = s.Offline || envTrue(getenv("HF_HUB_OFFLINE")) || envTrue(getenv("TRANSFORMERS_OFFLINE"))
	if s.Progress == nil {
		s.Progress = NewTextProgress(os.Stderr)
	}
	if s.ProgressInterval <= 0 {
		s.ProgressInterval = 200 * time.Millisecond
	}
	if s.ConnectTimeout <= 0 {
		s.ConnectTimeout = 10 * time.Second
	}
	if s.IdleTimeout <= 0 {
		if d, err := time.ParseDuration(strings.TrimSpace(getenv("HF_HUB_DOWNLOAD_TIMEOUT")) + "s"); err == nil && d > 0 {
			s.IdleTimeout = d
		} else {
			s.IdleTimeout = 30 * time.Second
		}
	}
	switch {
	case s.Retries == 0:
		s.Retries = 5
	case s.Retries < 0:
		s.Retries = 0
	}
	if s.Backoff <= 0 {
		s.Backoff = time.Second
	}
	if s.Concurrency <= 0 {
		s.Concurrency = 4
	}
	if s.Include == nil {
		s.Include = DefaultInclude
		s.defaultFiles = true
	}
	if s.Exclude == nil {
		s.Exclude = DefaultExclude
	}
	return s
}

// hfHome is $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
func hfHome(getenv func(string) string) string {
	if h := expandHome(getenv("HF_HOME"), getenv); h != "" {
		return h
	}
	if x := expandHome(getenv("XDG_CACHE_HOME"), getenv); x != "" {
		return filepath.Join(x, "huggingface")
	}
	return filepath.Join(expandHome("~", getenv), ".cache", "huggingface")
}

func expandHome(p string, getenv func(string) string) string {
	if p != "~" && !strings.HasPrefix(p, "~/") {
		return p
	}
	home := getenv("HOME")
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	return filepath.Join(home, p[1:])
}

func envTrue(v string) bool {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
