// Table tests of js/stats.js, the dashboard's pure functions (run by ui_test.go through node).
import assert from 'node:assert/strict';
import { aliasLines, baseModel, family, figures, parseAliases, phases, routeOf, routeStats, series } from '../js/stats.js';

for (const [model, want] of [
  ['mlx-community/Llama-3.2-1B-Instruct-4bit', 'llama-3.2-1b-instruct'],
  ['mlx-community/Llama-3.2-1B-Instruct-bf16', 'llama-3.2-1b-instruct'],
  ['mlx-community/Qwen3-8B-8bit', 'qwen3-8b'],
  ['Qwen/Qwen3-8B', 'qwen3-8b'],
  ['/tmp/models/tiny', 'tiny'],
  ['embedded', 'embedded'],
  ['', ''],
]) assert.equal(baseModel(model), want, model);

assert.equal(family({ model: 'x', architecture: 'Llama' }), 'llama');
assert.equal(family({ model: 'mlx-community/Qwen3-8B-4bit' }), 'qwen3');
assert.equal(family({ model: 'mlx-community/Llama-3.2-1B-Instruct-4bit' }), 'llama');

const remote = (id, decode, extra = {}) => ({
  request_id: id, status: 200, start: '2026-01-01T00:00:0' + id + 'Z', usage: { prompt_tokens: 900, completion_tokens: 11 },
  route: { entry_node: 'a', decode_node: 'b', decode_instance: decode },
  timings: { prefill_source: 'remote', queue_ms: 1, prefill_ms: 20, first_token_ms: 30, decode_ms: 100, total_ms: 131,
    remote_prefill: { instance_id: 'p', wait_ms: 5, transfer_ms: 15, ingest_ms: 3, exact: true, fallback_reason: null },
    route: { entry_node: 'a', decode_node: 'b', decode_instance: decode, routing_ms: 2, forwarded: true }, ...extra },
});
const link = { prefill_instances: ['p'], decode_instances: ['d'] };
const reqs = [
  remote('1', 'd'),
  remote('2', 'd', { prefill_source: 'local', remote_prefill: { instance_id: 'p', fallback_reason: 'dial: refused' } }),
  remote('3', 'd', { prefill_source: 'local', remote_prefill: undefined }),
  remote('4', 'other'),
  { request_id: '5', status: 499, start: '2026-01-01T00:00:05Z', route: { decode_instance: 'd' } },
  { request_id: '6', status: 503, start: '2026-01-01T00:00:06Z', route: { decode_instance: 'd' } },
];
const st = routeStats(link, reqs);
assert.equal(st.total, 3);
assert.equal(st.remote, 1);
assert.equal(st.viaLink, 1);
assert.deepEqual(st.fallbacks, { 'dial: refused': 1 });
assert.equal(st.local, 1);
assert.equal(st.stopped, 1);
assert.equal(st.failed, 1);
assert.equal(st.share, 1 / 3);
assert.equal(routeStats({ prefill_instances: [], decode_instances: ['none'] }, reqs).share, null);

// routeOf prefers the answer's route, and keeps the gateway's reason.
assert.equal(routeOf({ route: { decode_node: 'x', reason: 'why' }, timings: { route: { decode_node: 'b' } } }).decode_node, 'b');
assert.equal(routeOf({ route: { decode_node: 'x', reason: 'why' } }).reason, 'why');
// The answer's own reason (timings.route.reason) comes first: the owner of a hop has the entry's with it.
assert.equal(routeOf({ route: { reason: 'why' }, timings: { route: { reason: 'auto: remote 1 s vs local 2 s' } } }).reason, 'auto: remote 1 s vs local 2 s');

const f = figures(reqs[0]);
assert.equal(f.ttft, 32);
assert.equal(f.itl, 10);
assert.equal(f.tps, 100);
assert.deepEqual(figures({}), { ttft: null, itl: null, tps: null });

const s = series(reqs.slice(0, 4));
assert.equal(s.x.length, 4);
assert.ok(s.x.every((x, i) => i === 0 || x > s.x[i - 1]), 'x increases');
assert.deepEqual(s.share, [100, 50, 100 / 3, 50]);

const p = phases(reqs[0].timings);
const at = Object.fromEntries(p.rows.map((r) => [r.key, r]));
assert.deepEqual(Object.keys(at), ['routing', 'queue', 'prefill', 'wait', 'transfer', 'ingest', 'first', 'decode']);
assert.equal(at.queue.start, 2);
assert.equal(at.prefill.start, 3);
assert.equal(at.ingest.start, 3 + 15 - 3);
assert.equal(at.decode.start, 32);
assert.equal(p.total, 133);
assert.deepEqual(phases(null), { rows: [], total: 0 });
// A forwarded answer: the entry's routing time stands in for the owner's (none).
const fwd = phases({ ...reqs[0].timings, route: { routing_ms: 0 } }, 5);
assert.equal(fwd.rows[0].length, 5);
assert.equal(fwd.rows[1].start, 5);
assert.equal(routeOf({ route: { routing_ms: 4 }, timings: { route: { routing_ms: 0 } } }).routing_ms, 4);
console.log('stats: ok');

// Model aliases as the settings' text area shows and reads them.
assert.equal(aliasLines({ 'claude-opus-5-5': 'embedded', 'a': '/models/llama' }), 'a=/models/llama\nclaude-opus-5-5=embedded');
assert.equal(aliasLines(undefined), '');
assert.deepEqual(parseAliases(' a = /models/llama \n\nclaude-opus-5-5=embedded\n'), { a: '/models/llama', 'claude-opus-5-5': 'embedded' });
assert.deepEqual(parseAliases(''), {});
assert.throws(() => parseAliases('a=m\nclaude'), /line 2: want NAME=MODEL/);
assert.throws(() => parseAliases('=m'), /line 1/);
