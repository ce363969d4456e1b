package server

import (
	"bufio"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/duet-ai/duet/gateway/internal/apicore"
)

// What a load over the API (POST /v1/instances) may ask of a node: a model and a role, and engine options
// that tune the instance. Options that name an address or a file (where the KV server listens, what it
// advertises, the secret it signs with) are the node operator's, given with --engine-opt; a local model
// directory only under the operator's --models-dir. The operator's own loads (--model) are not limited.

// apiLoadOptions are the engine options a load over the API may set: the MLX engine's tuning and P/D
// options, and the echo engine's delays.
var apiLoadOptions = []string{
	"backend", "kv_checksum", "kv_frame_timeout", "kv_pickup_timeout", "max_batch", "max_queue",
	"memory_limit_mb", "model_id", "prefill_chunk", "prefill_delay", "prefix_cache_mb", "remote_prefill_required",
	"remote_prefill_threshold", "remote_prefill_timeout", "slowdown", "threads", "token_delay", "weights",
}

// operatorLoadOptions name an address or a file on the node: only --engine-opt sets them.
var operatorLoadOptions = []string{"cluster_secret_file", "kv_advertise", "kv_listen"}

// checkLoadOptions refuses an option a load over the API may not set, naming it.
func checkLoadOptions(opts map[string]string) error {
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(operatorLoadOptions, k) {
			return apicore.BadRequest("options", "option %s names an address or a file on the node: it is the node operator's setting (duet --engine-opt %s=...), not a request's", k, k)
		}
		if !slices.Contains(apiLoadOptions, k) {
			return apicore.BadRequest("options", "option %q is not one a load over the API may set (those are %s; others are the node operator's, with duet --engine-opt)", k, strings.Join(apiLoadOptions, ", "))
		}
	}
	return nil
}

// hubID is a Hugging Face repository id, org/name, with an optional @revision.
var hubID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(@[A-Za-z0-9][A-Za-z0-9_./-]{0,255})?$`)

func isHubID(model string) bool {
	return hubID.MatchString(model) && !strings.Contains(model, "..") && !strings.Contains(model, "--")
}

// modelUnavailable is the one answer for a model reference the node does not load over the API, whether it
// names nothing, something unreadable, or something outside --models-dir: the same status and words, so the
// API tells nothing about the node's files.
func modelUnavailable(model string) error {
	return &apicore.Error{Status: fiber.StatusNotFound, Type: apicore.TypeInvalidRequest, Param: "model", Code: "model_not_found",
		Message: fmt.Sprintf("model %q is not one this node loads over the API: give a Hugging Face id (org/name), \"embedded\", a model the node serves with --model, or a model directory under the node's --models-dir", model)}
}

// loadPolicy is what models a load over the API may name on this node: the operator's (--model), and local
// directories under --models-dir.
type loadPolicy struct {
	operatorModels []string
	// root is --models-dir with its symbolic links evaluated ("" when unset or unreadable).
	root string
}

func newLoadPolicy(cfg Config, log *slog.Logger) *loadPolicy {
	p := &loadPolicy{operatorModels: cfg.OperatorModels}
	if cfg.ModelsDir != "" {
		root, err := filepath.EvalSymlinks(cfg.ModelsDir)
		if abs, aerr := filepath.Abs(root); err == nil && aerr == nil {
			p.root = abs
		} else {
			log.Warn("--models-dir cannot be read: no local model loads over the API", "dir", cfg.ModelsDir, "error", err)
		}
	}
	return p
}

// resolveAPIModel returns what the engine is asked to load for a model named over the API, and the model's
// size on disk when it is a local directory (0 otherwise).
func (p *loadPolicy) resolveAPIModel(model string) (string, int64, error) {
	if model == "embedded" || slices.Contains(p.operatorModels, model) {
		return model, dirSize(model), nil
	}
	if isHubID(model) {
		if dir, ok := p.underModelsDir(model); ok {
			return dir, dirSize(dir), nil
		}
		// The engine would serve a directory of that name under its working directory before the hub's.
		if _, err := os.Lstat(model); err == nil {
			return "", 0, modelUnavailable(model)
		}
		return model, 0, nil
	}
	if dir, ok := p.underModelsDir(model); ok {
		return dir, dirSize(dir), nil
	}
	return "", 0, modelUnavailable(model)
}

// underModelsDir resolves a model reference against --models-dir (a relative one from it): with symbolic
// links evaluated it must be a readable directory inside it, or it is nothing. It returns the path as named
// (made absolute), not the link's target, so that the engine names the model after what was asked for (the
// MLX engine names a local model by its directory's name); whoever can change links inside --models-dir
// between this check and the load could point elsewhere, but that is the operator.
func (p *loadPolicy) underModelsDir(model string) (string, bool) {
	root := p.root
	if root == "" {
		return "", false
	}
	named := model
	if !filepath.IsAbs(named) {
		named = filepath.Join(root, named)
	}
	real, err := filepath.EvalSymlinks(named)
	if err != nil {
		return "", false
	}
	rel, err := filepath.Rel(root, real)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", false
	}
	f, err := os.Open(real)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		return "", false
	}
	if _, err := f.Readdirnames(1); err != nil {
		return "", false
	}
	return filepath.Clean(named), true
}

// dirSize is the bytes of the regular files under dir (0 for what is not a directory), the estimate of what
// loading it takes in memory; it stops counting after many files.
func dirSize(dir string) int64 {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return 0
	}
	var total int64
	files := 0
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if files++; files > 100_000 {
			return filepath.SkipAll
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// memAvailable is the memory the system can give without swapping (Linux's MemAvailable); ok is false where
// it is not known.
var memAvailable = func() (int64, bool) {
	if runtime.GOOS != "linux" {
		return 0, false
	}
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, false
			}
			return kb << 10, true
		}
	}
	return 0, false
}

// checkFits refuses a model whose size on disk is more than the memory available.
func checkFits(model string, size int64) error {
	avail, ok := memAvailable()
	if !ok || size == 0 || size <= avail {
		return nil
	}
	return &apicore.Error{Status: fiber.StatusInsufficientStorage, Type: apicore.TypeInvalidRequest, Param: "model", Code: "insufficient_memory",
		Message: fmt.Sprintf("model %q does not fit: it takes about %d MiB (its size on disk) and this node has %d MiB of memory available", model, size>>20, avail>>20)}
}
