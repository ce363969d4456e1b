// The dashboard with a large cluster (TestUIDashboardScale): 64 nodes, 256 instances, 32 routes, every path
// between the nodes and 512 recent requests, served by Playwright's request interception in place of the
// gateway's API (the page itself comes from a real gateway). Logs first-render and refresh times.
import { assert, launch, log, readConfig, step } from './ui_lib.mjs';

const cfg = await readConfig();
const N = cfg.nodes || 64;
const I = cfg.instances || 256;

// A deterministic pseudo-random sequence, so that every run draws the same cluster.
let seed = 42;
const rand = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648);

const kinds = ['thunderbolt', 'ethernet', 'wifi'];
const speeds = { thunderbolt: 40000, ethernet: 10000, wifi: 866 };
const nodes = [];
for (let i = 0; i < N; i++) {
  const id = `node-${String(i).padStart(2, '0')}`;
  const kind = kinds[i % 3];
  nodes.push({
    id, name: `${i % 2 ? 'dgx-spark' : 'mac-studio'}-${String(i).padStart(2, '0')}`, status: i === 7 || i === 41 ? 'failed' : 'alive',
    tags: { node_id: id, api_addr: `10.0.${i}.1:8000`, kv_addr: `10.0.${i}.1:7000`, version: 'dev', hardware_class: i % 2 ? 'dgx-spark' : 'm3-ultra' },
    addresses: [{ ip: `10.0.${i}.1`, prefix_len: 16, interface: 'en0', kind, speed_mbps: speeds[kind] }],
    gossip: `10.0.${i}.1:7946`,
  });
}
const models = [
  ['mlx-community/Llama-3.2-3B-Instruct-4bit', 'llama', '4bit'],
  ['mlx-community/Llama-3.2-3B-Instruct-bf16', 'llama', 'bf16'],
  ['mlx-community/Qwen3-8B-4bit', 'qwen3', '4bit'],
  ['mlx-community/Qwen3-8B-8bit', 'qwen3', '8bit'],
];
function instances(tick) {
  const out = [];
  for (let i = 0; i < I; i++) {
    const n = nodes[i % N];
    const [model, arch, q] = models[i % models.length];
    out.push({
      id: `${n.id}-${Math.floor(i / N)}`, model, node: n.id, role: 'both',
      status: n.status === 'failed' ? 'unavailable' : i % 37 === 5 ? 'loading' : 'ready',
      engine: 'mlx-engine', backend: 'metal', architecture: arch, quantization: q, parameters: 3e9, context_length: 131072,
      kv_endpoint: n.tags.kv_addr, fingerprint: `fp1:${model}`, kv_compat: `kv1:${arch}`,
      kv: { layers: 28, kv_heads: 8, head_dim: 128, dtype: 'bfloat16', bytes_per_token: 114688 },
      load: { in_flight: (i * 7 + tick) % 5, queued: (i + tick) % 3, updated_at: new Date().toISOString() },
    });
  }
  return out;
}
const links = [];
for (let l = 0; l < 32; l++) {
  const ins = instances(0);
  links.push({ link_id: `link-${String(l).padStart(4, '0')}`, prefill_instances: [ins[l * 8].id, ins[l * 8 + 4].id],
    decode_instances: [ins[l * 8 + 1].id, ins[l * 8 + 5].id], exact: l % 4 !== 1 });
}
const paths = [];
for (const a of nodes) {
  for (const b of nodes) {
    if (a === b) continue;
    const kind = a.addresses[0].kind === b.addresses[0].kind ? a.addresses[0].kind : 'ethernet';
    const rtt = 0.2 + rand() * 4;
    paths.push({ from: a.id, to: b.id, address: b.addresses[0].ip, interface: 'en0', kind, speed_mbps: speeds[kind],
      rtt_ms: rtt, rtt_known: true, quality: Math.min(1, 0.7 * Math.log10(speeds[kind]) / 5 + 0.3 / (1 + rtt)), direct: true });
  }
}
const requests = [];
const t0 = Date.now() - 512 * 2000;
for (let r = 0; r < 512; r++) {
  const ins = instances(0);
  const d = ins[(r * 5) % I];
  const p = ins[(r * 5 + 4) % I];
  const remote = r % 3 !== 0;
  const fallback = !remote && r % 9 === 3;
  const routing = 0.3 + rand();
  const timings = {
    prefill_source: remote ? 'remote' : 'local', queue_ms: rand() * 5, prefill_ms: 40 + rand() * 400,
    first_token_ms: 60 + rand() * 500, decode_ms: 500 + rand() * 3000, total_ms: 700 + rand() * 3500,
    route: { entry_node: nodes[r % N].id, decode_node: d.node, decode_instance: d.id, prefill_instance: p.id, prefill_node: p.node,
      prefill_address: p.kv_endpoint, forwarded: r % 2 === 0, routing_ms: routing },
  };
  if (remote || fallback) {
    timings.remote_prefill = { endpoint: p.kv_endpoint, instance_id: p.id, tokens: 2000, bytes: 2000 * 114688, wait_ms: 20 + rand() * 50,
      transfer_ms: 100 + rand() * 200, ingest_ms: 10 + rand() * 30, attempts: 1, fallback_reason: fallback ? 'dial tcp: connection refused' : null, exact: true };
  }
  requests.push({ seq: r + 1, request_id: `req${String(r).padStart(6, '0')}`, path: '/v1/chat/completions', model: d.model, stream: true,
    status: r % 50 === 7 ? 503 : 200, node: nodes[0].id, hop: false, start: new Date(t0 + r * 2000).toISOString(), duration_ms: 800 + rand() * 3000,
    route: { entry_node: timings.route.entry_node, decode_node: d.node, decode_instance: d.id, forwarded: r % 2 === 0 },
    timings: r % 50 === 7 ? undefined : timings, usage: { prompt_tokens: 2400, completion_tokens: 200 + Math.floor(rand() * 300), cached_tokens: 0 } });
}

const env = await launch(cfg);
const { page } = env;
let tick = 0;
const served = {};
const json = (route, body) => route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(body) });
let failState = false;
await page.route((u) => u.pathname === '/state', (route) => {
  served.state = (served.state || 0) + 1;
  if (failState) {
    return route.fulfill({ status: 503, contentType: 'application/json',
      body: JSON.stringify({ error: { message: 'the engine plugin is not running now; retry shortly', type: 'server_error', code: null, param: null } }) });
  }
  return json(route, { version: ++tick, local: nodes[0].id, nodes, instances: instances(tick).map((i) => ({ ...i, labels: { backend: 'metal' } })), links });
});
await page.route((u) => u.pathname === '/v1/instances', (route) => json(route, { instances: instances(tick) }));
await page.route((u) => u.pathname === '/v1/instance-links', (route) => json(route, links));
await page.route((u) => u.pathname === '/admin/v1/paths', (route) => json(route, { from: nodes[0].id, paths }));
await page.route((u) => u.pathname === '/admin/v1/cluster/stats', (route) => json(route, {
  nodes: nodes.filter((n) => n.status === 'alive').map((n) => ({ node: n.id, instances: instances(tick).filter((i) => i.node === n.id).map((i, k) => ({
    id: i.id, in_flight: i.load.in_flight, queued: i.load.queued, kv_bytes: (k + 1) * 2 ** 30, kv_capacity_bytes: 16 * 2 ** 30,
    prefix_hits: 40 + k, prefix_misses: 60, prefix_hit_tokens: 9000, prefix_bytes: 2 ** 28 })) })),
}));
await page.route((u) => u.pathname === '/admin/v1/requests', (route) => {
  const since = Number(new URL(route.request().url()).searchParams.get('since') || 0);
  return json(route, { node: nodes[0].id, capacity: 512, last: 512, requests: requests.filter((r) => r.seq > since) });
});
await page.route((u) => u.pathname === '/admin/v1/instance-links/check', (route) => json(route, { ok: true, exact: true }));

const out = {};
try {
  // Long tasks (main thread busy > 50 ms) while the page renders and refreshes.
  await page.addInitScript(() => {
    window.__longTasks = [];
    new PerformanceObserver((list) => { for (const e of list.getEntries()) window.__longTasks.push(e.duration); })
      .observe({ type: 'longtask', buffered: true });
  });

  await step(env, 'first render of the cluster view', async () => {
    await page.goto(cfg.url + '/#/cluster');
    out.first_render_ms = await (await page.waitForFunction(([n, i]) =>
      document.querySelectorAll('tr[data-node]').length === n && document.querySelectorAll('tr[data-instance]').length === i
        && document.querySelectorAll('.matrix span').length === n * n && performance.now(), [N, I], { polling: 'raf', timeout: 30000 })).jsonValue();
    out.first_data_ms = await page.evaluate(() => window.duetPerf.firstData);
    await env.shot('scale-cluster');
  });

  await step(env, 'refreshes while the cluster view is open', async () => {
    await page.waitForFunction(() => window.duetPerf.refreshes.length >= 5, null, { timeout: 40000 });
    out.refreshes = await page.evaluate(() => window.duetPerf.refreshes.map((r) => ({ fetch: r.fetch, render: r.render })));
    // A click still answers at once between refreshes.
    const t = Date.now();
    await page.fill('#instance-filter', 'qwen3');
    await page.waitForFunction(() => document.querySelectorAll('tr[data-instance]').length === 128);
    out.filter_ms = Date.now() - t;
    await page.fill('#instance-filter', '');
  });

  await step(env, 'a failed refresh shows the gateway\'s message, and goes away once it answers', async () => {
    failState = true;
    await page.locator('#banner', { hasText: 'the engine plugin is not running now' }).waitFor();
    await page.locator('#conn', { hasText: 'Not connected' }).waitFor();
    await env.shot('scale-error-banner');
    failState = false;
    await page.locator('#banner').waitFor({ state: 'hidden' });
  });

  await step(env, 'the routes view and its editor with 256 instances', async () => {
    let t = Date.now();
    await page.goto(cfg.url + '/#/routes');
    await page.waitForFunction(() => document.querySelectorAll('.route-card').length === 32);
    out.routes_ms = Date.now() - t;
    await env.shot('scale-routes');
    t = Date.now();
    await page.click('#new-route');
    await page.waitForFunction((n) => document.querySelectorAll('.pick').length === n, I);
    out.editor_ms = Date.now() - t;
    t = Date.now();
    await page.click('.pick button.prefill >> nth=0');
    await page.click('.pick button.decode >> nth=1');
    await page.locator('#route-check', { hasText: 'accepts this route' }).waitFor();
    out.toggle_and_check_ms = Date.now() - t;
    await env.shot('scale-editor');
    await page.click('#cancel-route');
  });

  await step(env, 'the requests view with 512 requests', async () => {
    const t = Date.now();
    await page.goto(cfg.url + '/#/requests');
    await page.waitForFunction(() => document.querySelectorAll('tr[data-request]').length === 100 && document.querySelectorAll('.chart canvas').length >= 4);
    out.requests_ms = Date.now() - t;
    await env.shot('scale-requests');
  });

  out.long_tasks_ms = await page.evaluate(() => window.__longTasks.slice().sort((a, b) => b - a).slice(0, 5));
  out.state_calls = served.state;
  assert(out.refreshes.length >= 5, 'too few refreshes');
  log({ ok: true, ...out });
} finally {
  await env.browser.close();
}
