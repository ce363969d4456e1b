// Requests: the recent requests a gateway recorded (those that entered it, and those other gateways forwarded
// to it), as timeline bars, and charts of time to first token, inter-token latency, decode speed and the share
// of prompts prefilled remotely, drawn with uPlot (vendored, see ui/vendor/uplot).

import uPlot from '../../vendor/uplot/uPlot.esm.js';
import { fmt, h, swap } from '../dom.js';
import { fallbackReasons, figures, routeOf, series, timingsOf } from '../stats.js';
import { nodeName, setRequestsNode, store, want } from '../store.js';
import { mini, timeline } from '../timeline.js';

export const title = 'Requests';

let els = null;
let unwant = null;
let charts = [];
let resize = null;
let open = new Set(); // seqs whose details are shown
let sig = '';
let limit = 100;

const chartDefs = [
  { key: 'ttft', title: 'Time to first token', unit: 'ms', color: '--seg-first' },
  { key: 'itl', title: 'Inter-token latency', unit: 'ms', color: '--seg-queue' },
  { key: 'tps', title: 'Decode speed', unit: 'tokens/s', color: '--seg-decode' },
  { key: 'share', title: 'Remote-prefill share (last 20 requests)', unit: '%', color: '--seg-prefill' },
];

export function mount(root) {
  sig = '';
  els = {
    nodeSel: h('select', { id: 'requests-node', onchange: (e) => { open = new Set(); setRequestsNode(e.target.value); } }),
    note: h('p', { class: 'muted' }),
    charts: h('div', { class: 'charts' }),
    summary: h('div'),
    table: h('div'),
  };
  root.append(
    h('h1', null, 'Recent requests'),
    h('div', { class: 'row' }, h('label', { for: 'requests-node' }, 'Gateway'), els.nodeSel),
    els.note,
    h('section', { class: 'panel', 'aria-labelledby': 'charts-h' }, h('h2', { id: 'charts-h' }, 'Over time'), els.charts),
    els.summary,
    h('section', { class: 'panel', 'aria-labelledby': 'req-h' }, h('h2', { id: 'req-h' }, 'Requests, newest first'),
      h('div', { class: 'legend' }, ['routing', 'queue', 'prefill', 'first', 'decode'].map((k) =>
        h('span', null, h('span', { class: 'swatch seg-' + k }), k === 'first' ? 'until the first token' : k))),
      els.table),
  );
  makeCharts();
  resize = new ResizeObserver(() => sizeCharts());
  resize.observe(els.charts);
  window.addEventListener('duet-theme', remakeCharts);
  unwant = want('requests');
  update('core');
}

export function unmount() {
  if (unwant) unwant();
  unwant = null;
  if (resize) resize.disconnect();
  window.removeEventListener('duet-theme', remakeCharts);
  for (const c of charts) c.plot.destroy();
  charts = [];
  els = null;
}

export function update(what) {
  if (!els) return;
  if (what === 'core') renderNodeSelect();
  if (what === 'requests' || what === 'core') render();
}

function renderNodeSelect() {
  const ids = store.nodes.filter((n) => !n.problem && n.status === 'alive').map((n) => n.id);
  const want = ['', ...ids.filter((id) => id !== store.local)];
  const have = [...els.nodeSel.options].map((o) => o.value);
  if (JSON.stringify(want) === JSON.stringify(have)) return;
  els.nodeSel.replaceChildren(...want.map((id) => h('option', { value: id, selected: id === store.requestsNode },
    id ? nodeName(id) : `this gateway (${nodeName(store.local) || '…'})`)));
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || '#888';
}

function chartWidth(box) {
  return Math.max(240, Math.floor(box.clientWidth) - 4);
}

// xRange spans the requests' times, a minute at least: uPlot widens a lone point's range to a thousand days.
function xRange(u, min, max) {
  const xs = u.data[0] || [];
  if (!xs.length) return [Date.now() / 1000 - 60, Date.now() / 1000];
  const lo = xs[0];
  const hi = xs[xs.length - 1];
  return hi - lo < 60 ? [lo - 30, hi + 30] : [lo, hi];
}

function makeCharts() {
  const data = series(store.requests);
  const text = cssVar('--text');
  const grid = cssVar('--chart-grid');
  for (const d of chartDefs) {
    const box = h('figure', { class: 'chart', 'data-chart': d.key, 'aria-label': `${d.title}, ${d.unit}` }, h('h3', null, d.title));
    els.charts.appendChild(box);
    const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const plot = new uPlot({
      width: chartWidth(box), height: 170,
      scales: { x: { time: true, range: xRange }, y: d.key === 'share' ? { range: [0, 100] } : { auto: true } },
      legend: { show: true },
      series: [{}, { label: `${d.title} (${d.unit})`, stroke: cssVar(d.color), width: 2, spanGaps: false,
        points: { show: true, size: 5, fill: cssVar(d.color) }, value: (u, v) => (v === null || v === undefined ? '–' : v.toFixed(1)) }],
      axes: [axis, { ...axis, size: 56, label: d.unit, labelSize: 18 }],
    }, [data.x, data[d.key]], box);
    charts.push({ def: d, plot, box });
  }
}

function remakeCharts() {
  if (!els) return;
  for (const c of charts) {
    c.plot.destroy();
    c.box.remove();
  }
  charts = [];
  makeCharts();
}

function sizeCharts() {
  if (!els) return;
  for (const c of charts) {
    const w = chartWidth(c.box);
    if (Math.abs(c.plot.width - w) > 2) c.plot.setSize({ width: w, height: 170 });
  }
}

function statusCell(r) {
  const cls = r.status >= 500 ? 'bad' : r.status >= 400 ? 'warn' : 'ok';
  return h('span', { class: 'badge ' + cls, title: r.error || null }, String(r.status));
}

function prefillCell(t) {
  if (!t) return h('span', { class: 'muted' }, '–');
  const r = t.remote_prefill;
  if (t.prefill_source === 'remote') return h('span', { class: 'badge prefill' }, r && r.exact === false ? 'remote ≈' : 'remote');
  if (r && r.fallback_reason) return h('span', { class: 'badge warn', title: r.fallback_reason }, 'fell back');
  return h('span', { class: 'badge' }, t.prefill_source || 'local');
}

function routeCell(r) {
  const rt = routeOf(r);
  return h('span', { class: 'small' }, nodeName(rt.entry_node) || '?',
    rt.forwarded || (rt.decode_node && rt.decode_node !== rt.entry_node) ? ` → ${nodeName(rt.decode_node)}` : '',
    rt.prefill_node && timingsOf(r) && timingsOf(r).prefill_source === 'remote' ? h('div', { class: 'muted' }, `prefill ${nodeName(rt.prefill_node)}`) : null,
    r.hop ? h('div', { class: 'muted' }, 'forwarded here') : null);
}

function render() {
  const reqs = store.requests;
  const s = JSON.stringify([store.requestsLast, reqs.length, store.requestsNode, [...open], limit, store.requestsError && store.requestsError.message, store.nodes.length]);
  if (s === sig) return;
  sig = s;
  const who = store.requestsNode ? nodeName(store.requestsNode) : `this gateway (${nodeName(store.local)})`;
  els.note.textContent = `The requests that entered ${who} or were forwarded to it to run, as it recorded them when they ended: it keeps its last 512. Other gateways keep their own; pick one above (read through this gateway).`;
  const data = series(reqs);
  for (const c of charts) c.plot.setData([data.x, data[c.def.key]]);

  const withT = reqs.filter((r) => timingsOf(r));
  const remote = withT.filter((r) => timingsOf(r).prefill_source === 'remote').length;
  const reasons = Object.entries(fallbackReasons(reqs)).sort((a, b) => b[1] - a[1]);
  const failed = reqs.filter((r) => r.status >= 400 && r.status !== 499).length;
  const stopped = reqs.filter((r) => r.status === 499).length;
  swap(els.summary, h('section', { class: 'panel', 'aria-labelledby': 'sum-h' }, h('h2', { id: 'sum-h' }, 'Summary'),
    store.requestsError ? h('p', { class: 'error' }, 'The recent requests could not be read: ' + store.requestsError.message) : null,
    h('p', null, `${reqs.length} requests · ${failed} failed · ${stopped} stopped by their client · ${remote} of ${withT.length} with timings prefilled remotely (${fmt.pct(withT.length ? remote / withT.length : null)})`),
    reasons.length ? h('div', null, 'Remote prefills that fell back:', h('ul', null, reasons.map(([r, n]) => h('li', null, `${r} — ${n}×`))))
      : h('p', { class: 'muted' }, 'No remote prefill fell back.')));

  if (!reqs.length) {
    return swap(els.table, h('p', { class: 'muted' }, store.requestsError ? '' : 'No request yet. Send one from the Chat page, or with any client.'));
  }
  const newest = reqs.slice().reverse();
  const shown = newest.slice(0, limit);
  const max = Math.max(...shown.map((r) => { const t = timingsOf(r); return t ? routeOf(r).routing_ms + (t.total_ms || 0) : 0; }), 1);
  const head = h('tr', null, ['Time', 'Request', 'Model', 'Status', 'Route', 'Prefill', 'TTFT', 'Tokens/s', 'Total', 'Timeline', ''].map((c, i) =>
    h('th', { scope: 'col', class: i >= 6 && i <= 8 ? 'num' : null }, c)));
  const body = h('tbody');
  for (const r of shown) {
    const t = timingsOf(r);
    const f = figures(r);
    const isOpen = open.has(r.seq);
    body.appendChild(h('tr', { class: isOpen ? 'open' : null, 'data-request': r.request_id },
      h('td', { class: 'nowrap' }, fmt.time(r.start)),
      h('td', null, h('span', { class: 'mono', title: r.request_id }, fmt.short(r.request_id, 10)), h('div', { class: 'muted small' }, r.path + (r.stream ? ' · stream' : ''))),
      h('td', { class: 'small' }, r.model),
      h('td', null, statusCell(r), r.error ? h('div', { class: 'small bad-text' }, r.error) : null),
      h('td', null, routeCell(r)),
      h('td', null, prefillCell(t)),
      h('td', { class: 'num' }, fmt.ms(f.ttft)),
      h('td', { class: 'num' }, f.tps === null ? '–' : fmt.num(f.tps)),
      h('td', { class: 'num' }, fmt.ms(r.duration_ms)),
      h('td', null, mini(t, max, routeOf(r).routing_ms)),
      h('td', null, h('button', { type: 'button', class: 'small', 'aria-expanded': String(isOpen), 'data-key': 'details:' + r.seq,
        onclick: () => { if (open.has(r.seq)) open.delete(r.seq); else open.add(r.seq); render(); } }, isOpen ? 'Hide' : 'Details'))));
    if (isOpen) {
      body.appendChild(h('tr', { class: 'detail-row' }, h('td', { colspan: '11' },
        t ? timeline(t, r.usage, { route: r.route }) : h('p', { class: 'muted' }, 'No timings: the request ended before its answer.'),
        !t && routeOf(r).reason ? h('p', { class: 'small' }, 'Router: ' + routeOf(r).reason) : null,
        h('details', null, h('summary', null, 'Raw record'), h('pre', { class: 'json' }, JSON.stringify(r, null, 2))))));
    }
  }
  swap(els.table,
    h('div', { class: 'table-wrap' }, h('table', { 'aria-label': 'Recent requests' }, h('thead', null, head), body)),
    newest.length > limit ? h('div', { class: 'actions' }, h('button', { type: 'button', 'data-key': 'more', onclick: () => { limit += 200; render(); } },
      `Show ${Math.min(200, newest.length - limit)} more (${newest.length - limit} hidden)`)) : null);
}
