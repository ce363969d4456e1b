// Package hubtest is a fake Hugging Face hub for tests: Server serves repositories built in the test (from a
// map of files or a directory such as t.TempDir()) the way huggingface.co does, on 127.0.0.1, so that nothing
// ever touches the network.
//
// What it serves, as the real hub does and huggingface_hub expects:
//   - GET /api/models/{org}/{name}/revision/{rev}: the commit hash ("sha") and the file listing ("siblings"),
//     with sizes, git blob ids and LFS sha256s when ?blobs=true is asked;
//   - HEAD and GET /{org}/{name}/resolve/{rev}/{path}: small files directly, with their git blob id as ETag and
//     X-Repo-Commit; LFS files (*.safetensors by default) as a 302 to a second listener, the "storage host",
//     with X-Linked-Etag (the sha256) and X-Linked-Size;
//   - byte ranges ("bytes=a-", "bytes=a-b") on both hosts, 416 for ranges past the end;
//   - errors with the hub's X-Error-Code header: RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo;
//   - gated repositories (files need a token: 401 without, 403 with a wrong one) and private ones (missing
//     without a token).
//
// Tests observe it through Requests and BytesServed, and break it with SetFault: drop the connection after n
// bytes, stall, flip a byte, ignore Range, or answer an error status, chosen per file and per attempt.
package hubtest
