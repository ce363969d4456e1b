// Package hub finds the model directory behind the engine's --model flag: a local directory as is, or a
// Hugging Face repository ("org/name", "org/name@revision") downloaded into the hub cache.
//
// Why our own client: the engine is a Go binary that must fetch the models people use with MLX without Python,
// and it must share the cache those people already have. So Resolve writes and reads exactly the layout of
// huggingface_hub (models--org--name/{blobs,refs,snapshots,trees}, relative symlinks, the same lock files), and
// a model downloaded by `huggingface-cli` or mlx-lm is served without a download, and vice versa. It reads the
// same environment: HF_ENDPOINT, HF_HUB_CACHE, HF_HOME, HF_TOKEN (or the token file), HF_HUB_OFFLINE.
//
// How a download goes: one request to /api/models/{repo}/revision/{rev}?blobs=true gives the commit and every
// file with its size and hash (a HEAD per file stands in on hubs that omit them). The files Options.Include
// selects — by default the configuration, tokenizer, chat template and safetensors files at the top level —
// are fetched from /{repo}/resolve/{commit}/{file}, Concurrency at a time; LFS files redirect to a storage host,
// which never sees the token. Each blob is written under an flock into blobs/<etag>.incomplete, resumed with
// Range requests after a dropped connection or a stall (and restarted when a server ignores Range), checked
// (size always, sha256 for LFS files, the git blob sha1 for the others), fsynced and renamed into place; the
// snapshot symlinks, the tree listing and refs/<rev> follow. Two processes resolving the same model share the
// work: the second waits for the blob lock and finds the blob done.
//
// Deadlines: dialing and TLS are bounded by ConnectTimeout, and every request by IdleTimeout of silence, but
// nothing bounds a transfer that keeps moving: multi-gigabyte shards take what they take. Transient failures
// (connection errors, stalls, 408/429/5xx) are retried with exponential backoff; the retry budget starts again
// whenever bytes arrived.
//
// Failure is explained: errors are *Error values that name the repository, revision and file, match a kind
// (ErrRepoNotFound, ErrAuth, ErrUnreachable, ErrNotCached, ErrIntegrity, ErrDiskFull, ...) with errors.Is, and
// say what to do (set HF_TOKEN, accept a gated model's terms, use a cached commit offline, free disk space).
// When the hub is unreachable, Resolve falls back to a complete cached snapshot of the revision, with a warning.
//
// Progress goes to a Progress: TextProgress, the default, draws a bar on a terminal and writes periodic log
// lines otherwise (the engine's stderr ends up in the gateway's log); the engine can forward Events instead.
//
// Package hubtest is the fake hub the tests run against; nothing here touches the network in tests.
package hub
