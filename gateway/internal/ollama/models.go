package ollama

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/duet-ai/duet/sdk/engine"
)

// Model is what the cluster knows of one model it serves, for /api/tags, /api/show and /api/ps.
type Model struct {
	ID         string // duet's model id
	ModifiedAt time.Time
	// Facts of an instance of it: this node's own when it has one, else another node's (which do not say
	// DType or Capabilities).
	Backend, Architecture, Quantization, DType string
	Parameters                                 int64
	ContextLength                              int
	Fingerprint                                string
	// Capabilities are Ollama's names for what the model does ("completion", "tools", "thinking"); nil when
	// no instance of it here says.
	Capabilities []string
}

// latest is the tag of a model named without one, as Ollama names it.
const latest = ":latest"

// Name is the name a model is listed by: its id with Ollama's default tag when it has no tag of its own
// ("echo" is "echo:latest", "qwen3:8b" stays). Ollama's clients show it and send it back.
func Name(id string) string {
	if strings.Contains(id[strings.LastIndexByte(id, '/')+1:], ":") {
		return id
	}
	return id + latest
}

// Resolve finds the model a client means: the id itself, or the id it listed as id:latest.
func Resolve(name string, known func(id string) bool) (string, bool) {
	if name != "" && known(name) {
		return name, true
	}
	if id, ok := strings.CutSuffix(name, latest); ok && id != "" && known(id) {
		return id, true
	}
	return "", false
}

// Capabilities names an engine's capabilities as Ollama does.
func Capabilities(c engine.Capabilities) []string {
	var out []string
	if c.Chat || c.Completions {
		out = append(out, "completion")
	}
	if c.Tools {
		out = append(out, "tools")
	}
	if c.Reasoning {
		out = append(out, "thinking")
	}
	return out
}

// details is Ollama's ModelDetails.
type details struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
	ContextLength     int      `json:"context_length,omitempty"`
}

func (m Model) details() details {
	d := details{Format: m.Backend, Family: m.Architecture, ParameterSize: parameterSize(m.Parameters),
		QuantizationLevel: m.Quantization, ContextLength: m.ContextLength}
	if d.QuantizationLevel == "" {
		d.QuantizationLevel = m.DType // unquantized: its weights' type, as Ollama says of safetensors models
	}
	if m.Architecture != "" {
		d.Families = []string{m.Architecture}
	}
	return d
}

// digest stands in for the digest of Ollama's manifest: the SHA-256 of the model's fingerprint (its
// weights), or of its id when no instance says.
func (m Model) digest() string {
	key := m.Fingerprint
	if key == "" {
		key = m.ID
	}
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// size estimates the bytes of the weights, from the parameter count and the bits each takes (0: unknown).
// duet loads models from directories or hubs, not Ollama's blobs: there is no file size to report.
func (m Model) size() int64 {
	return m.Parameters * int64(bitsPerWeight(m.Quantization, m.DType)) / 8
}

var (
	bitsIn = regexp.MustCompile(`(?i)(\d{1,2})[-_]?bits?\b`) // MLX's "affine-4bit-g64", "8-bit"
	ggufIn = regexp.MustCompile(`(?i)^i?q(\d)(?:_|$)`)       // GGUF's "Q4_K_M", "IQ3_XS", "q8_0"
)

func bitsPerWeight(quant, dtype string) int {
	if quant != "" {
		for _, re := range []*regexp.Regexp{bitsIn, ggufIn} {
			if m := re.FindStringSubmatch(quant); m != nil {
				if n, _ := strconv.Atoi(m[1]); n > 0 && n <= 32 {
					return n
				}
			}
		}
		return 0
	}
	switch dtype {
	case "bfloat16", "float16":
		return 16
	case "float32":
		return 32
	}
	return 0
}

// parameterSize writes a parameter count as Ollama shows it: "8.0B", "596M".
func parameterSize(n int64) string {
	switch {
	case n <= 0:
		return ""
	case n >= 1e9:
		return strconv.FormatFloat(float64(n)/1e9, 'f', 1, 64) + "B"
	case n >= 1e6:
		return strconv.FormatFloat(float64(n)/1e6, 'f', 0, 64) + "M"
	case n >= 1e3:
		return strconv.FormatFloat(float64(n)/1e3, 'f', 0, 64) + "K"
	}
	return strconv.FormatInt(n, 10)
}

type listed struct {
	Name         string    `json:"name"`
	Model        string    `json:"model"`
	ModifiedAt   time.Time `json:"modified_at"`
	Size         int64     `json:"size"`
	Digest       string    `json:"digest"`
	Details      details   `json:"details"`
	Capabilities []string  `json:"capabilities,omitempty"`
}

// AppendTags appends the /api/tags body: every model the cluster serves.
func AppendTags(dst []byte, models []Model) []byte {
	out := struct {
		Models []listed `json:"models"`
	}{Models: []listed{}}
	for _, m := range models {
		out.Models = append(out.Models, listed{Name: Name(m.ID), Model: Name(m.ID), ModifiedAt: m.ModifiedAt.UTC(),
			Size: m.size(), Digest: m.digest(), Details: m.details(), Capabilities: m.Capabilities})
	}
	return appendJSON(dst, out)
}

type running struct {
	Name          string    `json:"name"`
	Model         string    `json:"model"`
	Size          int64     `json:"size"`
	Digest        string    `json:"digest"`
	Details       details   `json:"details"`
	ExpiresAt     time.Time `json:"expires_at"`
	SizeVRAM      int64     `json:"size_vram"`
	ContextLength int       `json:"context_length"`
}

// AppendPs appends the /api/ps body: the models some instance serves now. duet keeps them loaded, so each
// expires at expires (Ollama's answer for keep_alive -1 is far in the future too).
func AppendPs(dst []byte, models []Model, expires time.Time) []byte {
	out := struct {
		Models []running `json:"models"`
	}{Models: []running{}}
	for _, m := range models {
		size := m.size()
		out.Models = append(out.Models, running{Name: Name(m.ID), Model: Name(m.ID), Size: size, Digest: m.digest(),
			Details: m.details(), ExpiresAt: expires.UTC(), SizeVRAM: size, ContextLength: m.ContextLength})
	}
	return appendJSON(dst, out)
}

// AppendShow appends the /api/show body. Clients read the context length from model_info (as
// "<architecture>.context_length") or from num_ctx in parameters, and what the model can do from
// capabilities.
func AppendShow(dst []byte, m Model) []byte {
	info := map[string]any{"general.basename": m.ID}
	arch := m.Architecture
	if arch != "" {
		info["general.architecture"] = arch
	} else {
		arch = "general"
	}
	if m.Parameters > 0 {
		info["general.parameter_count"] = m.Parameters
	}
	var params string
	if m.ContextLength > 0 {
		info[arch+".context_length"] = m.ContextLength
		params = fmt.Sprintf("num_ctx %d", m.ContextLength)
	}
	caps := m.Capabilities
	if caps == nil {
		caps = []string{"completion"} // another node's model: that it generates is all the cluster says
	}
	out := struct {
		Modelfile    string         `json:"modelfile"`
		Parameters   string         `json:"parameters,omitempty"`
		Details      details        `json:"details"`
		ModelInfo    map[string]any `json:"model_info"`
		Capabilities []string       `json:"capabilities"`
		ModifiedAt   time.Time      `json:"modified_at"`
	}{
		Modelfile:  fmt.Sprintf("# Served by duet: the model's own chat template renders prompts.\nFROM %s\n", m.ID),
		Parameters: params, Details: m.details(), ModelInfo: info, Capabilities: caps, ModifiedAt: m.ModifiedAt.UTC(),
	}
	return appendJSON(dst, out)
}

// AppendVersion appends the /api/version body.
func AppendVersion(dst []byte, version string) []byte {
	return appendJSON(dst, struct {
		Version string `json:"version"`
	}{version})
}

var semver = regexp.MustCompile(`^v?(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]*)?)$`)

// Version is what /api/version reports for a duet version: the version when it is a semantic version
// (clients compare it), else 0.0.0-duet (a development build).
func Version(duet string) string {
	if m := semver.FindStringSubmatch(duet); m != nil {
		return m[1]
	}
	return "0.0.0-duet"
}

func appendJSON(dst []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the shapes above always marshal
	}
	return append(dst, b...)
}
