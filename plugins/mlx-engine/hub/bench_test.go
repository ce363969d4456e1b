package hub_test

import (
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/duet-ai/duet/plugins/mlx-engine/hub"
	"github.com/duet-ai/duet/plugins/mlx-engine/hub/hubtest"
)

const benchSize = 64 << 20

// BenchmarkResolve downloads a 64 MiB model into a fresh cache per iteration: redirect, transfer over loopback,
// sha256, write and fsync. Compare with BenchmarkRawGet, the same bytes read into io.Discard, for the cost of
// verifying and storing them.
func BenchmarkResolve(b *testing.B) {
	srv := hubtest.NewServer(b)
	srv.AddRepo(repoID, hubtest.RepoOptions{}).Commit(modelFiles(benchSize))
	opts := hub.Options{Endpoint: srv.URL, Progress: hub.Discard, Getenv: env(b, nil)}
	b.SetBytes(benchSize)
	for b.Loop() {
		opts.CacheDir = b.TempDir()
		if _, err := hub.Resolve(context.Background(), repoID, opts); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawGet(b *testing.B) {
	srv := hubtest.NewServer(b)
	srv.AddRepo(repoID, hubtest.RepoOptions{}).Commit(modelFiles(benchSize))
	b.SetBytes(benchSize)
	buf := make([]byte, 256<<10)
	for b.Loop() {
		resp, err := http.Get(srv.URL + "/" + repoID + "/resolve/main/model.safetensors")
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf); err != nil || n != benchSize {
			b.Fatal(n, err)
		}
		resp.Body.Close()
	}
}
