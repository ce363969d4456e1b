// One request's timeline: where it ran (entry, decode, prefill nodes) and its phases on one time axis, from
// the answer's timings object. The chat shows it under each answer, the requests view under each row.

import { h, fmt } from './dom.js';
import { phases, routeOf } from './stats.js';
import { instanceById, nodeName } from './store.js';

function who(id) {
  if (!id) return '?';
  const name = nodeName(id);
  return name === id ? id : `${name} (${fmt.short(id, 10)})`;
}

const labels = {
  routing: (t, rt) => (rt.routing_ms > 0 ? `routing · ${who(rt.entry_node)}`
    : rt.forwarded ? `routing · ${who(rt.entry_node)} (its time is not carried by the hop)` : 'routing'),
  queue: () => 'queue',
  prefill: (t, rt) => {
    if (t.prefill_source === 'remote') return `prefill · remote on ${who(prefillNode(t, rt))}`;
    if (t.prefill_source === 'cache') return 'prefill · from the prefix cache';
    const fb = t.remote_prefill && t.remote_prefill.fallback_reason;
    return fb ? 'prefill · local (remote fell back)' : 'prefill · local';
  },
  wait: () => '  ↳ remote: wait for first KV',
  transfer: () => '  ↳ remote: KV transfer',
  ingest: () => '  ↳ remote: KV ingest',
  first: () => 'first token',
  decode: (t, rt) => `decode · ${who(rt.decode_node)}`,
};

// prefillNode is the node that served a remote prefill: its instance's node (the engine may have used a later
// endpoint than the router's first), else the route's.
function prefillNode(t, rt) {
  const r = t && t.remote_prefill;
  const inst = r && r.instance_id ? instanceById(r.instance_id) : null;
  return (inst && inst.node) || rt.prefill_node;
}

// routeLine says in words where a request ran.
export function routeLine(t, rt) {
  const parts = [];
  parts.push(h('span', null, 'entered ', h('b', null, who(rt.entry_node))));
  if (rt.forwarded) parts.push(' → forwarded to ', h('b', null, who(rt.decode_node)));
  parts.push(' · decoded on ', h('b', null, who(rt.decode_node)),
    rt.decode_instance ? h('span', { class: 'muted' }, ` (instance ${rt.decode_instance})`) : null);
  if (t && t.prefill_source === 'remote') {
    const r = t.remote_prefill || {};
    parts.push(' · prefilled remotely on ', h('b', { class: 'prefill-node' }, who(prefillNode(t, rt))),
      h('span', { class: 'muted' }, ` (instance ${r.instance_id || rt.prefill_instance}${r.endpoint ? ' at ' + r.endpoint : ''})`),
      r.exact === false ? h('span', { class: 'badge warn', title: 'The KV came from another quantization of the model' }, 'approximate KV') : null);
  } else if (t && t.remote_prefill && t.remote_prefill.fallback_reason) {
    parts.push(' · remote prefill on ', h('b', null, who(prefillNode(t, rt))), ' fell back: ',
      h('span', { class: 'warn-text' }, t.remote_prefill.fallback_reason));
  } else if (t) {
    parts.push(t.prefill_source === 'cache' ? ' · prompt served from the prefix cache' : ' · prefilled locally');
  }
  return h('p', { class: 'route-line' }, parts);
}

// timeline renders the timings object of one answer (as the API returns it). usage adds token counts;
// extra.seen is what the client itself measured ({ttft, total} in ms).
export function timeline(t, usage, extra = {}) {
  const rt = routeOf({ timings: t, route: extra.route });
  const { rows, total } = phases(t, rt.routing_ms);
  const box = h('section', { class: 'timeline', 'aria-label': 'Timeline of this answer' });
  // For tests and scripts: where it ran, by node id.
  box.dataset.entryNode = rt.entry_node;
  box.dataset.decodeNode = rt.decode_node;
  box.dataset.prefillSource = t.prefill_source || '';
  if (t.prefill_source === 'remote') box.dataset.prefillNode = prefillNode(t, rt) || '';
  box.appendChild(routeLine(t, rt));
  if (rt.reason) box.appendChild(h('p', { class: 'small route-reason' }, 'Router: ' + rt.reason));
  for (const row of rows) {
    const bar = h('span', { class: `tl-bar seg-${row.key}` });
    bar.style.left = (100 * row.start) / total + '%';
    bar.style.width = (100 * row.length) / total + '%';
    const label = labels[row.key](t, rt);
    box.appendChild(h('div', { class: 'tl-row', 'data-phase': row.key },
      h('span', { class: 'tl-label' }, label),
      h('span', { class: 'tl-track', role: 'img', 'aria-label': `${label}: ${fmt.ms(row.length)}, from ${fmt.ms(row.start)}` }, bar),
      h('span', { class: 'tl-val' }, fmt.ms(row.length))));
  }
  const foot = [];
  foot.push(`total ${fmt.ms(total)}`);
  if (t.remote_prefill) {
    const r = t.remote_prefill;
    foot.push(`KV ${fmt.bytes(r.bytes)} for ${r.tokens} tokens` + (r.attempts > 1 ? ` in ${r.attempts} attempts` : ''));
  }
  if (usage) {
    foot.push(`${usage.prompt_tokens} prompt tokens` + (usage.cached_tokens ? ` (${usage.cached_tokens} cached)` : ''));
    foot.push(`${usage.completion_tokens} completion tokens`);
    const n = usage.completion_tokens;
    if (n >= 2 && t.decode_ms > 0) foot.push(`${fmt.num((n - 1) / (t.decode_ms / 1000))} tokens/s`);
  }
  if (extra.seen && extra.seen.ttft) foot.push(`first token seen by this page after ${fmt.ms(extra.seen.ttft)}`);
  box.appendChild(h('p', { class: 'tl-foot' }, foot.join(' · ')));
  return box;
}

// mini is a compact bar of a request's routing, queue, prefill, first-token and decode time, scaled to max ms.
export function mini(t, max, routingMS) {
  const el = h('span', { class: 'mini', role: 'img' });
  if (!t) {
    el.setAttribute('aria-label', 'no timings');
    return el;
  }
  const routing = routingMS ?? ((t.route && t.route.routing_ms) || 0);
  const parts = [
    ['routing', routing],
    ['queue', t.queue_ms || 0],
    ['prefill', t.prefill_ms || 0],
    ['first', Math.max(0, (t.first_token_ms || 0) - (t.queue_ms || 0) - (t.prefill_ms || 0))],
    ['decode', t.decode_ms || 0],
  ];
  for (const [k, v] of parts) {
    const s = h('span', { class: 'seg-' + k, title: `${k} ${fmt.ms(v)}` });
    s.style.width = (100 * v) / Math.max(max, 0.001) + '%';
    el.appendChild(s);
  }
  el.setAttribute('aria-label', parts.map(([k, v]) => `${k} ${fmt.ms(v)}`).join(', '));
  return el;
}
