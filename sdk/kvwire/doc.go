// Package kvwire moves the KV cache of a prefilled prompt from a prefill engine to a decode engine over TCP,
// in exo's wire format (exo PR #1993, worker/disaggregated/protocol.py), so that duet and exo peers
// interoperate in both directions, and faster and safer than exo does it.
//
// # Protocol
//
// One TCP connection carries one exchange. Every frame is a 4-byte big-endian length followed by that many
// bytes of MessagePack; every message is a map keyed by field name (msgspec's default encoding).
//
//	client -> server  request       {request_id, model_id, token_ids: [int], start_pos}
//	server -> client  header        {request_id, model_id, num_layers, dtype, start_pos}
//	                  messages, each a map whose first key is "type":
//	                    kv_chunk     {type, layer_idx, num_tokens, n_heads, head_dim, dtype, keys: bin, values: bin}
//	                    arrays_state {type, layer_idx, arrays: [{dtype, shape: [int], data: bin}]}
//	                    done         {type, total_tokens}
//	                    error        {type, code, message}
//
// token_ids are absolute from position 0 (the prompt without its last token); start_pos is how many leading
// positions the client already holds; the server sends positions [start_pos, len(token_ids)). keys and values
// are row-major [num_tokens, n_heads, head_dim] arrays of raw little-endian elements of dtype ("bfloat16",
// "float16" or "float32"); a layer may arrive in several chunks, in token order. exo sends each layer whole after
// its prefill; a duet server streams a chunk per layer as each prefill step finishes, which the format allows.
//
// Layers of different kinds carry different positions. L is len(token_ids). A full-attention layer sends
// [start_pos, L). A sliding-window layer with window W sends the positions its window holds at the end of the
// prompt: duet sends those the client lacks, [max(start_pos, L-W), L), and exo sends the buffer its
// RotatingKVCache holds after prefill, [max(0, L-W), L). The receiver therefore anchors a sliding layer's chunks
// at the end: m positions received are [L-m, L), whatever start_pos was. done.total_tokens keeps exo's meaning,
// L - start_pos (what a full layer carries), not a per-layer count.
//
// Hybrid models (Qwen3-Next, Qwen3.5: Gated DeltaNet linear-attention layers between attention layers) send no
// kv_chunk for a linear layer but one arrays_state holding mlx-lm's ArraysCache arrays: the conv window
// ([1, K-1, conv_dim] in the KV dtype) and the recurrent state ([1, Nv, Dv, Dk] float32). header.num_layers counts
// every layer (exo's len(cache)), header.dtype is the attention layers' KV dtype, and done.total_tokens stays
// L - start_pos (a state counts no positions). A state cannot be sliced, so it always describes the whole prompt
// [0, L), even when start_pos > 0 (and when start_pos = L), and the client replaces its own with it. A duet server
// sends the states after the last kv_chunk, in layer order; exo's sends each layer in turn, so receivers accept
// states interleaved with chunks.
// The client keeps its side of the connection open until the end (exo's does): a duet server reads EOF or any
// byte after the request as the client leaving, and aborts the job at once.
// A server that fails sends a header with no layers (dtype float32) and an error: 400 bad request, 401
// unauthorized, 500 internal, 503 busy (not picked up in time, stopping, or full). See README.md for the frames
// byte by byte.
//
// # Extensions
//
// Extensions are extra map keys, prefixed duet_, written only when negotiated. msgspec ignores unknown keys, so a
// plain exo server ignores a duet client's extension keys and a plain exo client ignores a duet server's; a duet
// peer notices an exo peer by the missing acknowledgement and falls back to plain behaviour.
//
//   - Authentication. A client that knows the cluster secret adds duet_auth_ts (Unix milliseconds),
//     duet_auth_nonce (16 random bytes) and duet_auth_mac, an HMAC-SHA256 over a canonical encoding of the
//     request's fields, the timestamp and the nonce (see RequestMAC). A server with secrets rejects, with 401, a
//     wrong MAC, a timestamp outside its window (30 s by default), and a nonce it has accepted within the window
//     (replay); with RequireAuth it also rejects requests without a proof. Secrets rotate: the server accepts any
//     of a list. Only the client is authenticated, and nothing is encrypted: run the wire on a trusted network or
//     inside a tunnel if KV contents are confidential.
//   - Checksums. A client sets duet_checksum: "crc32c" in the request; a server that honours it repeats it in
//     the header and adds duet_crc32c (CRC-32C of keys then values; of every array's data for arrays_state) to
//     each message, which the client verifies before handing the chunk over. Without the acknowledgement the
//     client verifies nothing.
//
// # Safety
//
// Bytes from the network are decoded by this package's own bounded MessagePack reader, never by a general
// decoder: frames are capped (Server: 16 MiB requests; Fetch: 1 GiB), a frame's buffer grows with the bytes
// that actually arrive, what requests hold before their proof is verified is bounded across all connections
// (ServerConfig.MaxUnauthenticatedBytes), jobs without a proof are limited per client address and in all,
// every str, bin, array and map length is checked against the bytes left in the frame
// before anything is allocated or iterated, arrays are validated before their storage is allocated, unknown
// values are skipped without recursion and nested at most MaxNesting deep, and tensor bytes are aliased, not
// copied. Decoders accept any key order and integer width and ignore unknown keys; missing or mistyped fields,
// duplicated keys, unknown dtypes or message types and inconsistent shapes are typed errors. Every network step
// has a deadline.
//
// # Engine integration
//
// The engine owns one compute loop. The Server reads each request on the connection's goroutine and hands a Job to
// ServerConfig.Dispatch, which queues it for the loop; the loop calls Job.Accept (a job not accepted within
// PickupTimeout is answered 503) and streams through the returned Writer: Header, then Chunk for every attention
// layer as each prefill step finishes, ArraysState for every linear layer, then Done or Error. Writer calls queue
// frames for the connection's goroutine, which writes the tensor bytes straight from the engine's buffers to the
// socket, so compute overlaps transfer; the queue is bounded in bytes (backpressure), buffers come back through a
// release callback, and a client that leaves cancels Job.Context and fails the next Writer call. Server.Stop
// drains accepted jobs. On the other side, Fetch streams the header and chunks to a Handler as they arrive, so the
// decode engine ingests while the rest is still on the wire, with typed errors (*RemoteError, and errors matching
// ErrProtocol, ErrTimeout or ErrConnLost) that tell it when to fall back to a local prefill.
//
// The kvwiretest subpackage provides exo-shaped peers (plain server and client, no extensions) for tests.
package kvwire
