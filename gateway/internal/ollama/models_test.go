package ollama

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/duet-ai/duet/gateway/internal/apitest"
	"github.com/duet-ai/duet/sdk/engine"
)

func TestNames(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"echo": "echo:latest", "qwen3:8b": "qwen3:8b", "mlx-community/Qwen3-0.6B-4bit": "mlx-community/Qwen3-0.6B-4bit:latest",
		"/models/llama:3/weights": "/models/llama:3/weights:latest", "host:5000/org/m": "host:5000/org/m:latest",
	} {
		if got := Name(id); got != want {
			t.Errorf("Name(%q) = %q, want %q", id, got, want)
		}
		// What is listed finds its way back.
		if got, ok := Resolve(Name(id), func(s string) bool { return s == id }); !ok || got != id {
			t.Errorf("Resolve(%q) = %q, %v; want %q", Name(id), got, ok, id)
		}
	}
	known := func(s string) bool { return s == "echo" || s == "qwen3:8b" }
	for _, c := range []struct {
		name, want string
		ok         bool
	}{
		{"echo", "echo", true}, {"echo:latest", "echo", true}, {"qwen3:8b", "qwen3:8b", true},
		{"qwen3:8b:latest", "qwen3:8b", true}, {"echo:7b", "", false}, {"llama3", "", false}, {":latest", "", false}, {"", "", false},
	} {
		if got, ok := Resolve(c.name, known); got != c.want || ok != c.ok {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}

func TestSizes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		params       int64
		quant, dtype string
		size         int64
		label        string
	}{
		{8_030_261_248, "Q4_K_M", "", 4_015_130_624, "8.0B"},
		{596_049_920, "affine-4bit-g64", "bfloat16", 298_024_960, "596M"},
		{1_500_000_000, "", "bfloat16", 3_000_000_000, "1.5B"},
		{124_000, "", "float32", 496_000, "124K"},
		{70_000_000_000, "q8_0", "", 70_000_000_000, "70.0B"},
		{1000, "fp8-e4m3", "", 0, "1K"},
		{0, "", "", 0, ""},
	} {
		m := Model{Parameters: c.params, Quantization: c.quant, DType: c.dtype}
		if got := m.size(); got != c.size {
			t.Errorf("%d %q %q: size %d, want %d", c.params, c.quant, c.dtype, got, c.size)
		}
		if got := parameterSize(c.params); got != c.label {
			t.Errorf("parameterSize(%d) = %q, want %q", c.params, got, c.label)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"v1.4.2": "1.4.2", "0.9.0-rc.1": "0.9.0-rc.1", "dev": "0.0.0-duet", "": "0.0.0-duet", "1.2": "0.0.0-duet"} {
		if got := Version(in); got != want {
			t.Errorf("Version(%q) = %q, want %q", in, got, want)
		}
	}
}

// models are a model this node serves (all its facts) and one only another node does (what gossip carries).
func models() []Model {
	loaded := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	return []Model{
		{ID: "mlx-community/Qwen3-0.6B-4bit", ModifiedAt: loaded, Backend: "mlx", Architecture: "qwen3", Quantization: "affine-4bit-g64",
			DType: "bfloat16", Parameters: 596_049_920, ContextLength: 40960, Fingerprint: "fp1:0123456789abcdef",
			Capabilities: Capabilities(engine.Capabilities{Chat: true, Completions: true, Tools: true, Reasoning: true})},
		{ID: "echo", ModifiedAt: loaded.Add(time.Hour), Backend: "echo", Architecture: "echo", ContextLength: 1 << 20},
	}
}

func TestModelBodies(t *testing.T) {
	t.Parallel()
	ms := models()
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"tags.json", AppendTags(nil, ms)},
		{"tags_empty.json", AppendTags(nil, nil)},
		{"show.json", AppendShow(nil, ms[0])},
		{"show_remote.json", AppendShow(nil, ms[1])},
		{"show_unknown.json", AppendShow(nil, Model{ID: "bare", ModifiedAt: ms[0].ModifiedAt})},
		{"ps.json", AppendPs(nil, ms, time.Date(2318, 6, 26, 2, 36, 0, 0, time.UTC))},
		{"ps_empty.json", AppendPs(nil, nil, time.Time{})},
		{"version.json", AppendVersion(nil, Version("v1.4.2"))},
	} {
		apitest.GoldenJSON(t, c.name, c.body)
	}
}

// TestTagsDecodeAsOllama: the list decodes into the fields Ollama's Go client reads.
func TestTagsDecodeAsOllama(t *testing.T) {
	t.Parallel()
	var list struct {
		Models []struct {
			Name       string    `json:"name"`
			Model      string    `json:"model"`
			ModifiedAt time.Time `json:"modified_at"`
			Size       int64     `json:"size"`
			Digest     string    `json:"digest"`
			Details    struct {
				Family        string   `json:"family"`
				Families      []string `json:"families"`
				ParameterSize string   `json:"parameter_size"`
			} `json:"details"`
		} `json:"models"`
	}
	if err := json.Unmarshal(AppendTags(nil, models()), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 2 || list.Models[0].Name != "mlx-community/Qwen3-0.6B-4bit:latest" || len(list.Models[0].Digest) != 64 ||
		list.Models[0].Details.ParameterSize != "596M" || list.Models[1].Model != "echo:latest" {
		t.Errorf("%+v", list)
	}
}
