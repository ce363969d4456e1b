package hub

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub/hubtest"
)

func TestParseRef(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		repo     string
		rev      string
		errorSay string
	}{
		{in: "mlx-community/Llama-3.2-1B-Instruct-4bit", repo: "mlx-community/Llama-3.2-1B-Instruct-4bit", rev: "main"},
		{in: "Qwen/Qwen3-0.6B@v1.0", repo: "Qwen/Qwen3-0.6B", rev: "v1.0"},
		{in: "gpt2", repo: "gpt2", rev: "main"},
		{in: "org/name@refs/pr/1", repo: "org/name", rev: "refs/pr/1"},
		{in: "org/name@0123456789abcdef0123456789abcdef01234567", repo: "org/name", rev: "0123456789abcdef0123456789abcdef01234567"},
		{in: "", errorSay: "not of the form"},
		{in: "a/b/c", errorSay: "not of the form"},
		{in: "org/", errorSay: "empty part"},
		{in: "org/na--me", errorSay: "'--'"},
		{in: "org/na..me", errorSay: "'..'"},
		{in: "org/-name", errorSay: "start or end"},
		{in: "org/name.", errorSay: "start or end"},
		{in: "org/n m", errorSay: "only letters"},
		{in: "org/" + strings.Repeat("x", 97), errorSay: "longer than 96"},
		{in: "org/name@", errorSay: "empty revision"},
		{in: "org/name@../x", errorSay: "segment"},
		{in: "org/name@/x", errorSay: "start or end"},
		{in: "org/name@a//b", errorSay: "segment"},
		{in: "org/name@a\\b", errorSay: "contains"},
		{in: "org/name@a\nb", errorSay: "contains"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRef(tt.in)
			if tt.errorSay != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errorSay) {
					t.Fatalf("ParseRef(%q) = %+v, %v; want an error saying %q", tt.in, r, err, tt.errorSay)
				}
				return
			}
			if err != nil || r.Repo != tt.repo || r.Revision != tt.rev {
				t.Fatalf("ParseRef(%q) = %+v, %v; want %s@%s", tt.in, r, err, tt.repo, tt.rev)
			}
		})
	}
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{"org/name", "org/name@main", "a@refs/pr/1", "x/y@../../etc", "../..", "org/na\x00me"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			return
		}
		// Whatever parses must stay inside the cache when used as paths.
		for _, p := range []string{r.folder(), filepath.Join("refs", filepath.FromSlash(r.Revision))} {
			if !filepath.IsLocal(p) {
				t.Fatalf("ParseRef(%q) = %+v gives the non-local path %q", s, r, p)
			}
		}
		if strings.Contains(r.folder(), "/") {
			t.Fatalf("folder %q has a separator", r.folder())
		}
	})
}

func FuzzValidRepoPath(f *testing.F) {
	for _, s := range []string{"config.json", "a/b.json", "../x", "/etc/passwd", "a//b", "a/./b", "C:\\x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if validRepoPath(s) && !filepath.IsLocal(filepath.FromSlash(s)) {
			t.Fatalf("validRepoPath(%q) but it is not local", s)
		}
	})
}

func TestParseContentRange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in           string
		start, total int64
		ok           bool
	}{
		{"bytes 100-199/1000", 100, 1000, true},
		{"bytes 0-0/1", 0, 1, true},
		{"bytes 5-9/*", 5, -1, true},
		{"bytes */1000", 0, 0, false},
		{"items 1-2/3", 0, 0, false},
		{"bytes -5-9/10", 0, 0, false},
		{"bytes 5-9", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		start, total, ok := parseContentRange(tt.in)
		if start != tt.start || total != tt.total || ok != tt.ok {
			t.Errorf("parseContentRange(%q) = %d, %d, %v; want %d, %d, %v", tt.in, start, total, ok, tt.start, tt.total, tt.ok)
		}
	}
}

func TestSelectFiles(t *testing.T) {
	t.Parallel()
	var files []remoteFile
	for _, p := range []string{"config.json", "model.safetensors", "pytorch_model.bin", "chat_template.jinja", "README.md",
		"original/params.json", "onnx/model.safetensors", "consolidated.safetensors", "sub/tokenizer.json"} {
		files = append(files, remoteFile{Path: p})
	}
	tests := []struct {
		name             string
		include, exclude []string
		want             string
	}{
		{"defaults", DefaultInclude, DefaultExclude, "chat_template.jinja config.json model.safetensors"},
		{"everything minus defaults", []string{"*", "*/*"}, DefaultExclude, "README.md chat_template.jinja config.json model.safetensors onnx/model.safetensors sub/tokenizer.json"},
		{"folder pattern", []string{"sub/*"}, nil, "sub/tokenizer.json"},
		{"full-path exclude", []string{"*/*"}, []string{"onnx/*"}, "original/params.json sub/tokenizer.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, f := range selectFiles(files, tt.include, tt.exclude) {
				got = append(got, f.Path)
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("selected %q, want %q", strings.Join(got, " "), tt.want)
			}
		})
	}
}

func TestSettleFromEnvironment(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	hfHomeDir := filepath.Join(home, "hf")
	if err := os.MkdirAll(hfHomeDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(hfHomeDir, "token"), []byte("  hf_from_file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    Options
		env     map[string]string
		cache   string
		token   string
		offline bool
		idle    time.Duration
		ep      string
	}{
		{name: "nothing set", cache: filepath.Join(home, ".cache/huggingface/hub"), ep: DefaultEndpoint, idle: 30 * time.Second},
		{name: "XDG", env: map[string]string{"XDG_CACHE_HOME": "/x"}, cache: "/x/huggingface/hub", ep: DefaultEndpoint, idle: 30 * time.Second},
		{name: "HF_HOME and its token file", env: map[string]string{"HF_HOME": hfHomeDir}, cache: filepath.Join(hfHomeDir, "hub"), token: "hf_from_file", ep: DefaultEndpoint, idle: 30 * time.Second},
		{name: "HF_HUB_CACHE wins", env: map[string]string{"HF_HOME": hfHomeDir, "HF_HUB_CACHE": "~/c", "HF_TOKEN": "hf_env", "HF_ENDPOINT": "http://mirror/", "HF_HUB_OFFLINE": "yes", "HF_HUB_DOWNLOAD_TIMEOUT": "7"},
			cache: filepath.Join(home, "c"), token: "hf_env", offline: true, ep: "http://mirror", idle: 7 * time.Second},
		{name: "legacy names", env: map[string]string{"HUGGINGFACE_HUB_CACHE": "/legacy", "HUGGING_FACE_HUB_TOKEN": "hf_old", "TRANSFORMERS_OFFLINE": "1"},
			cache: "/legacy", token: "hf_old", offline: true, ep: DefaultEndpoint, idle: 30 * time.Second},
		{name: "options win", opts: Options{CacheDir: "/o", Token: "hf_opt", Endpoint: "http://o", IdleTimeout: time.Second},
			env: map[string]string{"HF_HUB_CACHE": "/e", "HF_TOKEN": "hf_env", "HF_ENDPOINT": "http://e"}, cache: "/o", token: "hf_opt", ep: "http://o", idle: time.Second},
		{name: "offline false", env: map[string]string{"HF_HUB_OFFLINE": "0"}, cache: filepath.Join(home, ".cache/huggingface/hub"), ep: DefaultEndpoint, idle: 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"HOME": home}
			for k, v := range tt.env {
				env[k] = v
			}
			tt.opts.Getenv = func(k string) string { return env[k] }
			s := tt.opts.settle()
			if s.CacheDir != tt.cache || s.Token != tt.token || s.Offline != tt.offline || s.Endpoint != tt.ep || s.IdleTimeout != tt.idle {
				t.Errorf("settled to cache %q token %q offline %v endpoint %q idle %s; want %q %q %v %q %s",
					s.CacheDir, s.Token, s.Offline, s.Endpoint, s.IdleTimeout, tt.cache, tt.token, tt.offline, tt.ep, tt.idle)
			}
		})
	}
}

// TestDiskSpaceCheckedFirst: with less free space than the download needs, Resolve fails before any file
// request, and says how much is needed.
func TestDiskSpaceCheckedFirst(t *testing.T) {
	t.Parallel()
	srv := hubtest.NewServer(t)
	srv.AddRepo("org/m", hubtest.RepoOptions{}).Commit(map[string][]byte{
		"config.json": []byte("{}"), "model.safetensors": make([]byte, 3<<20),
	})
	d := newDownloader(Options{Endpoint: srv.URL, CacheDir: t.TempDir(), Progress: Discard, Getenv: func(string) string { return "" }},
		Ref{Repo: "org/m", Revision: "main"})
	d.freeSpace = func(string) (uint64, bool) { return 1 << 20, true }
	_, err := d.resolve(context.Background())
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "3.00 MiB to download, 1.00 MiB free") {
		t.Fatalf("err = %v, want ErrDiskFull with the sizes", err)
	}
	for _, r := range srv.Requests() {
		if strings.Contains(r.Path, "/resolve/") || r.Host == "storage" {
			t.Errorf("file request %+v before the space check", r)
		}
	}
}

func TestFormat(t *testing.T) {
	t.Parallel()
	bytes := map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.00 KiB", 1536: "1.50 KiB", 35 << 20: "35.0 MiB",
		2900 << 20: "2.83 GiB", 500 << 30: "500 GiB"}
	for n, want := range bytes {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	durations := map[time.Duration]string{45 * time.Second: "45s", 725 * time.Second: "12m05s", 3*time.Hour + 4*time.Minute: "3h04m",
		250 * time.Millisecond: "250ms"}
	for d, want := range durations {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%s) = %q, want %q", d, got, want)
		}
	}
}
