package mlxengine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub"
	"github.com/duet-ai/duet/plugins/mlx-engine/modelgen"
	"github.com/duet-ai/duet/sdk/engine"
)

// resolveModel turns a model reference into a local directory and a model id: the embedded model is generated
// into a temporary directory (it takes a fraction of a second, and the cleanup function removes it), a local
// directory is served as is, and a Hugging Face id is downloaded into the hub cache.
func resolveModel(ctx context.Context, ref string, log *slog.Logger) (dir, id string, cleanup func(), err error) {
	if ref == EmbeddedModel {
		dir, cleanup, err := generateEmbedded()
		if err != nil {
			return "", "", nil, engine.Errorf(engine.CodeInternal, "generate the embedded model: %v", err)
		}
		return dir, EmbeddedModel, cleanup, nil
	}
	if st, err := os.Stat(ref); err == nil {
		if !st.IsDir() {
			return "", "", nil, engine.InvalidParam("model", "%s is not a directory", ref)
		}
		return ref, modelIDFor(ref), nil, nil
	}
	if looksLikeHubID(ref) {
		dir, err := resolveHub(ctx, ref, log)
		if err != nil {
			return "", "", nil, err
		}
		return dir, strings.SplitN(ref, "@", 2)[0], nil, nil
	}
	return "", "", nil, engine.Errorf(engine.CodeNotFound, "model %q is neither a local directory, %q, nor a Hugging Face id (org/name)", ref, EmbeddedModel)
}

func looksLikeHubID(ref string) bool {
	name := strings.SplitN(ref, "@", 2)[0]
	parts := strings.Split(name, "/")
	return len(parts) == 2 && parts[0] != "" && parts[1] != "" && !strings.HasPrefix(ref, ".") && !strings.HasPrefix(ref, "/")
}

// embeddedPrefix names the temporary directories of generated embedded models; the pid suffix lets a later
// process remove the directories of processes that died without cleaning up.
const embeddedPrefix = "duet-embedded-"

func generateEmbedded() (string, func(), error) {
	sweepEmbedded()
	dir, err := os.MkdirTemp("", embeddedPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", nil, err
	}
	if err := modelgen.Generate(dir, modelgen.Embedded()); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, func() { os.RemoveAll(dir) }, nil
}

// sweepEmbedded removes embedded-model directories whose process is gone.
func sweepEmbedded() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), embeddedPrefix+"*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), embeddedPrefix)
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if p, err := os.FindProcess(pid); err == nil && p.Signal(syscall.Signal(0)) == nil {
			continue // alive
		}
		os.RemoveAll(m)
	}
}

// resolveHub downloads (or finds in the cache) a model from the Hugging Face hub. The hub package reads the
// usual environment (HF_ENDPOINT, HF_HUB_CACHE, HF_HOME, HF_TOKEN, HF_HUB_OFFLINE) and reports progress on
// stderr, which reaches the gateway's log.
func resolveHub(ctx context.Context, ref string, log *slog.Logger) (string, error) {
	log.Info("resolving model on the Hugging Face hub", "model", ref)
	dir, err := hub.Resolve(ctx, ref, hub.Options{})
	if err == nil {
		return dir, nil
	}
	code := engine.CodeInternal
	switch {
	case errors.Is(err, hub.ErrRepoNotFound), errors.Is(err, hub.ErrRevisionNotFound), errors.Is(err, hub.ErrFileNotFound),
		errors.Is(err, hub.ErrNotCached):
		code = engine.CodeNotFound
	case errors.Is(err, hub.ErrAuth), errors.Is(err, hub.ErrNoModel):
		code = engine.CodeInvalidArgument
	case errors.Is(err, hub.ErrUnreachable):
		code = engine.CodeUnavailable
	}
	return "", &engine.Error{Code: code, Param: "model", Message: fmt.Sprintf("model %s: %v", ref, err)}
}
