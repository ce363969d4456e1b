// Pure functions over what the API returns: model families, per-route figures and chart series from the
// recent requests. No DOM here, so node can test them (ui/test/stats.test.mjs).

const quantSuffix = /[-_.](?:\d+(?:\.\d+)?bit(?:s)?(?:[-_]?(?:dwq|awq|mixed))?|bf16|fp16|f16|fp32|f32|fp8|int[48]|q\d(?:_[a-z0-9]+)*|mlx|gguf|awq|gptq|dwq|mxfp4|nvfp4|quantized)$/i;

// baseModel is a model id without its organisation and quantization: both quantizations of one model share
// it, as exo's deriveBaseModel intends.
export function baseModel(model) {
  let m = String(model || '').split(/[\\/]/).filter(Boolean).pop() || '';
  m = m.toLowerCase();
  for (let i = 0; i < 4 && quantSuffix.test(m); i++) m = m.replace(quantSuffix, '');
  return m;
}

// family is the architecture an engine reports (llama, qwen3), else the model name's first word.
export function family(inst) {
  if (inst && inst.architecture) return String(inst.architecture).toLowerCase();
  const b = baseModel(inst && inst.model);
  const m = b.match(/^[a-z]+\d*/);
  return m ? m[0] : b;
}

// timingsOf is a recent request's timings (the answer's own object, route included) or null.
export function timingsOf(r) {
  return r && r.timings && typeof r.timings === 'object' ? r.timings : null;
}

// routeOf is where a request ran: the answer's route when it has one, else what the gateway recorded.
export function routeOf(r) {
  const t = timingsOf(r);
  const a = (t && t.route) || {};
  const b = (r && r.route) || {};
  return {
    entry_node: a.entry_node || b.entry_node || '',
    decode_node: a.decode_node || b.decode_node || '',
    decode_instance: a.decode_instance || b.decode_instance || '',
    prefill_node: a.prefill_node || b.prefill_node || '',
    prefill_instance: a.prefill_instance || b.prefill_instance || '',
    prefill_address: a.prefill_address || b.prefill_address || '',
    forwarded: !!(a.forwarded || b.forwarded),
    // A forwarded answer's timings are its owner's, which did not route it: the entry's record has the time.
    routing_ms: a.routing_ms || b.routing_ms || 0,
    reason: a.reason || b.reason || '',
  };
}

// routeStats sums up, for one instance link, the requests decoded by its decode instances: how many, how many
// prefilled remotely, how many tried and fell back (by reason), how many prefilled locally without trying
// (a short or cached prompt), how many used approximate KV, and how many ended without an answer (failed, or
// stopped by their client).
export function routeStats(link, requests) {
  const decode = new Set(link.decode_instances || []);
  const prefill = new Set(link.prefill_instances || []);
  const out = { total: 0, remote: 0, viaLink: 0, approximate: 0, fallbacks: {}, local: 0, cache: 0, failed: 0, stopped: 0 };
  for (const r of requests) {
    const rt = routeOf(r);
    if (!decode.has(rt.decode_instance)) continue;
    const t = timingsOf(r);
    if (!t) {
      if (r.status === 499) out.stopped++;
      else if (r.status >= 400) out.failed++;
      continue;
    }
    out.total++;
    const remote = t.remote_prefill;
    if (t.prefill_source === 'remote') {
      out.remote++;
      if (remote && prefill.has(remote.instance_id)) out.viaLink++;
      if (remote && remote.exact === false) out.approximate++;
    } else if (remote && remote.fallback_reason) {
      out.fallbacks[remote.fallback_reason] = (out.fallbacks[remote.fallback_reason] || 0) + 1;
    } else if (t.prefill_source === 'cache') {
      out.cache++;
    } else {
      out.local++;
    }
  }
  out.share = out.total ? out.remote / out.total : null;
  return out;
}

// fallbackReasons counts the fallback reasons of all requests.
export function fallbackReasons(requests) {
  const out = {};
  for (const r of requests) {
    const t = timingsOf(r);
    const reason = t && t.remote_prefill && t.remote_prefill.fallback_reason;
    if (reason) out[reason] = (out[reason] || 0) + 1;
  }
  return out;
}

// figures are one request's derived numbers: time to first token, inter-token latency and decode speed.
export function figures(r) {
  const t = timingsOf(r);
  if (!t) return { ttft: null, itl: null, tps: null };
  const routing = routeOf(r).routing_ms;
  const ttft = t.first_token_ms > 0 ? t.first_token_ms + routing : null;
  const n = r.usage ? r.usage.completion_tokens : 0;
  const itl = n >= 2 && t.decode_ms > 0 ? t.decode_ms / (n - 1) : null;
  const tps = n >= 2 && t.decode_ms > 0 ? (n - 1) / (t.decode_ms / 1000) : null;
  return { ttft, itl, tps };
}

// series is the charts' data, in uPlot's shape: x (seconds) and one array per chart, null where a request has
// no figure. share is the remote-prefill share over the last `window` requests with timings.
export function series(requests, window = 20) {
  const rs = requests.filter((r) => timingsOf(r)).slice().sort((a, b) => Date.parse(a.start) - Date.parse(b.start));
  const x = [];
  const ttft = [];
  const itl = [];
  const tps = [];
  const share = [];
  const recent = [];
  let lastX = -Infinity;
  for (const r of rs) {
    let sec = Date.parse(r.start) / 1000;
    if (sec <= lastX) sec = lastX + 0.001; // uPlot wants x strictly increasing
    lastX = sec;
    const f = figures(r);
    x.push(sec);
    ttft.push(f.ttft);
    itl.push(f.itl);
    tps.push(f.tps);
    recent.push(timingsOf(r).prefill_source === 'remote' ? 1 : 0);
    if (recent.length > window) recent.shift();
    share.push((100 * recent.reduce((a, b) => a + b, 0)) / recent.length);
  }
  return { x, ttft, itl, tps, share };
}

// phases lays one request's timings out on one time axis (milliseconds from its arrival at the gateway that
// routed it): routing, queue, prefill (with a remote prefill's wait, transfer and ingest), the first token,
// decode. Each phase has a start and a length; total is the axis length. routingMS, when given, is the
// routing time to use (an entry gateway's, for a forwarded answer).
export function phases(t, routingMS) {
  if (!t) return { rows: [], total: 0 };
  const routing = routingMS ?? ((t.route && t.route.routing_ms) || 0);
  const queue = t.queue_ms || 0;
  const prefill = t.prefill_ms || 0;
  const rows = [];
  rows.push({ key: 'routing', start: 0, length: routing });
  rows.push({ key: 'queue', start: routing, length: queue });
  const p0 = routing + queue;
  rows.push({ key: 'prefill', start: p0, length: prefill, source: t.prefill_source || 'local' });
  const r = t.remote_prefill;
  if (r) {
    rows.push({ key: 'wait', start: p0, length: r.wait_ms || 0 });
    rows.push({ key: 'transfer', start: p0, length: r.transfer_ms || 0 });
    const tEnd = p0 + (r.transfer_ms || 0);
    rows.push({ key: 'ingest', start: Math.max(p0, tEnd - (r.ingest_ms || 0)), length: r.ingest_ms || 0 });
  }
  const first = routing + (t.first_token_ms || 0);
  rows.push({ key: 'first', start: routing, length: t.first_token_ms || 0 });
  rows.push({ key: 'decode', start: first, length: t.decode_ms || 0 });
  const total = Math.max(routing + (t.total_ms || 0), ...rows.map((x) => x.start + x.length), 0.001);
  return { rows, total };
}

// aliasLines writes aliases as the text area shows them, sorted by name.
export function aliasLines(aliases) {
  return Object.keys(aliases || {}).sort().map((k) => `${k}=${aliases[k]}`).join('\n');
}

// parseAliases reads the text area: one NAME=MODEL a line; blank lines are skipped. It throws on a line
// without a name or a model; the gateway checks the rest.
export function parseAliases(text) {
  const out = {};
  text.split('\n').forEach((line, i) => {
    line = line.trim();
    if (!line) return;
    const eq = line.indexOf('=');
    const name = eq < 0 ? '' : line.slice(0, eq).trim();
    const model = eq < 0 ? '' : line.slice(eq + 1).trim();
    if (!name || !model) throw new Error(`line ${i + 1}: want NAME=MODEL, got "${line}"`);
    out[name] = model;
  });
  return out;
}
