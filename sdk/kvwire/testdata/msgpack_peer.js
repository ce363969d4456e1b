// An independent implementation of exo's KV wire protocol on npm @msgpack/msgpack, for kvwire's interop tests.
// Objects are built with exo's field order (msgspec: declaration order, a tagged struct's "type" first).
//
//   node msgpack_peer.js frames        print exo-shaped frames, one hex line each
//   node msgpack_peer.js decode        decode the frames on stdin, print one JSON line each (bin as {"$bin": hex})
//   node msgpack_peer.js client ADDR   fetch as a plain exo client, print a JSON summary of what arrived
//   node msgpack_peer.js server        serve one request as a plain exo server; print the port first
"use strict";

const net = require("net");
const crypto = require("crypto");
// Resolved from the working directory, testdata/node, where the pinned fixtures are installed.
const { encode, decode } = require(require.resolve("@msgpack/msgpack", { paths: [process.cwd()] }));

function frame(obj) {
  const body = encode(obj);
  const out = Buffer.alloc(4 + body.length);
  out.writeUInt32BE(body.length, 0);
  Buffer.from(body.buffer, body.byteOffset, body.length).copy(out, 4);
  return out;
}

// pattern: byte i of a tensor is (i * 31 + seed) mod 256.
function pattern(n, seed) {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed) & 0xff;
  return b;
}

function exoFrames() {
  const big = 64 * 8 * 128 * 2; // 64 tokens, 8 heads, head_dim 128, bfloat16: bin32
  return [
    { request_id: "req-1", model_id: "llama", token_ids: [1, 200, 300, 70000], start_pos: 2 },
    { request_id: "req-1", model_id: "llama", num_layers: 32, dtype: "bfloat16", start_pos: 2 },
    { request_id: "", model_id: "", num_layers: 0, dtype: "float32", start_pos: 0 },
    { type: "kv_chunk", layer_idx: 3, num_tokens: 1, n_heads: 1, head_dim: 2, dtype: "bfloat16",
      keys: Uint8Array.of(0x80, 0x3f, 0x00, 0x40), values: Uint8Array.of(0x40, 0x40, 0x80, 0x40) },
    { type: "arrays_state", layer_idx: 1,
      arrays: [{ dtype: "float32", shape: [2], data: Uint8Array.of(0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0) }] },
    { type: "done", total_tokens: 4096 },
    { type: "error", code: 503, message: "busy" },
    { type: "kv_chunk", layer_idx: 31, num_tokens: 64, n_heads: 8, head_dim: 128, dtype: "bfloat16",
      keys: pattern(big, 1), values: pattern(big, 2) },
    { request_id: "r".repeat(40), model_id: "m".repeat(300),
      token_ids: Array.from({ length: 70000 }, (_, i) => (i * 7919) % 128256), start_pos: 69999 },
  ].map(frame);
}

function toJSON(v) {
  // The replacer sees values after Buffer#toJSON; look at the original through the holder.
  return JSON.stringify(v, function (k, x) {
    const orig = this[k];
    return orig instanceof Uint8Array ? { $bin: Buffer.from(orig).toString("hex") } : x;
  });
}

// FrameReader collects socket data and yields complete frame bodies.
class FrameReader {
  constructor() { this.buf = Buffer.alloc(0); }
  push(data) { this.buf = Buffer.concat([this.buf, data]); }
  next() {
    if (this.buf.length < 4) return null;
    const n = this.buf.readUInt32BE(0);
    if (this.buf.length < 4 + n) return null;
    const body = this.buf.subarray(4, 4 + n);
    this.buf = this.buf.subarray(4 + n);
    return body;
  }
}

function client(addr) {
  const [host, port] = [addr.slice(0, addr.lastIndexOf(":")), Number(addr.slice(addr.lastIndexOf(":") + 1))];
  const req = JSON.parse(require("fs").readFileSync(0, "utf8"));
  const sock = net.connect(port, host, () => sock.write(frame(req)));
  const fr = new FrameReader();
  const out = { header: null, messages: [] };
  const hash = crypto.createHash("sha256");
  sock.setTimeout(20000, () => { console.error("timeout"); process.exit(2); });
  sock.on("data", (d) => {
    fr.push(d);
    for (let body; (body = fr.next()) !== null;) {
      const m = decode(body);
      if (out.header === null) { out.header = m; continue; }
      if (m.type === "kv_chunk") {
        hash.update(m.keys); hash.update(m.values);
        m.keys = m.keys.length; m.values = m.values.length;
      }
      out.messages.push(m);
      if (m.type === "done" || m.type === "error") {
        out.sha256 = hash.digest("hex");
        process.stdout.write(toJSON(out) + "\n");
        sock.destroy();
        return;
      }
    }
  });
  sock.on("error", (e) => { console.error(e.message); process.exit(1); });
}

function server() {
  const srv = net.createServer((sock) => {
    const fr = new FrameReader();
    sock.on("data", (d) => {
      fr.push(d);
      const body = fr.next();
      if (body === null) return;
      const req = decode(body); // unknown keys (duet's extensions) are simply not looked at
      const layers = 3, heads = 2, dim = 16;
      const n = req.token_ids.length - req.start_pos;
      sock.write(frame({ request_id: req.request_id, model_id: req.model_id, num_layers: layers,
        dtype: "float16", start_pos: req.start_pos }));
      for (let layer = 0; layer < layers; layer++) {
        const size = n * heads * dim * 2;
        sock.write(frame({ type: "kv_chunk", layer_idx: layer, num_tokens: n, n_heads: heads, head_dim: dim,
          dtype: "float16", keys: pattern(size, 2 * layer), values: pattern(size, 2 * layer + 1) }));
      }
      sock.end(frame({ type: "done", total_tokens: req.token_ids.length - req.start_pos }));
      srv.close();
    });
  });
  srv.listen(0, "127.0.0.1", () => process.stdout.write(srv.address().port + "\n"));
}

function main() {
  switch (process.argv[2]) {
    case "frames":
      for (const f of exoFrames()) process.stdout.write(f.toString("hex") + "\n");
      break;
    case "decode": {
      const fr = new FrameReader();
      fr.push(require("fs").readFileSync(0));
      for (let body; (body = fr.next()) !== null;) process.stdout.write(toJSON(decode(body)) + "\n");
      break;
    }
    case "client":
      client(process.argv[3]);
      break;
    case "server":
      server();
      break;
    default:
      console.error("usage: msgpack_peer.js frames|decode|client ADDR|server");
      process.exit(2);
  }
}

main();
