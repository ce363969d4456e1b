// Cluster: the nodes (health, hardware, addresses), the path between every pair of nodes, and the instances
// (model, role, backend, status, load, measured speed, KV memory, prefix-cache hit ratio), with loading and
// unloading models.

import { api } from '../api.js';
import { h, fmt, swap, table } from '../dom.js';
import { nodeName, refreshCore, statsOf, store, want } from '../store.js';

export const title = 'Cluster';

let ctx = null;
let els = null;
let unwant = [];
let pathFrom = '';
let filter = '';
let sig = { nodes: '', instances: '', paths: '' };

export function mount(root, c) {
  ctx = c;
  sig = { nodes: '', instances: '', paths: '' };
  els = {
    summary: h('div', { class: 'summary', 'aria-label': 'Cluster summary' }),
    nodes: h('div'),
    pathsBody: h('div'),
    instances: h('div'),
  };
  const filterInput = h('input', {
    type: 'search', id: 'instance-filter', placeholder: 'model, node, status…', value: filter,
    oninput: (e) => { filter = e.target.value; sig.instances = ''; renderInstances(); },
  });
  root.append(
    h('h1', null, 'Cluster'),
    els.summary,
    h('section', { class: 'panel', 'aria-labelledby': 'nodes-h' }, h('h2', { id: 'nodes-h' }, 'Nodes'), els.nodes),
    h('section', { class: 'panel', 'aria-labelledby': 'paths-h' },
      h('div', { class: 'panel-head' }, h('h2', { id: 'paths-h' }, 'Paths between nodes')),
      h('p', { class: 'muted small' }, 'The address each node uses to reach another, its link kind and speed, the round-trip estimate (serf\'s Vivaldi coordinates) and the quality routers score it with (0–1), as this gateway sees them.'),
      els.pathsBody),
    h('section', { class: 'panel', 'aria-labelledby': 'inst-h' },
      h('div', { class: 'panel-head' }, h('h2', { id: 'inst-h' }, 'Instances'),
        h('div', { class: 'row' }, h('label', { for: 'instance-filter' }, 'Filter'), filterInput)),
      els.instances),
    loadForm(),
  );
  unwant = [want('paths'), want('stats')];
  update('core');
}

export function unmount() {
  for (const u of unwant) u();
  unwant = [];
  els = null;
}

export function update(what) {
  if (!els) return;
  if (what === 'core' || what === 'error') {
    renderSummary();
    renderNodes();
    renderInstances();
    renderPaths();
    refreshNodeSelect();
  } else if (what === 'stats') {
    renderInstances();
  } else if (what === 'paths') {
    renderPaths();
  }
}

function renderSummary() {
  const alive = store.nodes.filter((n) => n.status === 'alive').length;
  const ready = store.instances.filter((i) => i.status === 'ready').length;
  swap(els.summary,
    h('div', null, h('b', null, `${alive} / ${store.nodes.length}`), 'nodes alive'),
    h('div', null, h('b', null, `${ready} / ${store.instances.length}`), 'instances ready'),
    h('div', null, h('b', null, String(store.links.length)), 'P/D routes'),
    h('div', null, h('b', null, nodeName(store.local) || '–'), 'this gateway'));
}

function statusBadge(s) { return h('span', { class: 'badge ' + s }, s); }

function addresses(n) {
  if (!n.addresses || !n.addresses.length) return h('span', { class: 'muted' }, 'none advertised');
  return h('span', null, n.addresses.map((a, i) => [i ? h('br') : null,
    h('span', { class: 'mono' }, `${a.ip}${a.prefix_len ? '/' + a.prefix_len : ''}`),
    ` ${a.interface || ''} ${a.kind}${a.speed_mbps ? ' ' + fmt.mbps(a.speed_mbps) : ''}`]));
}

function renderNodes() {
  const s = JSON.stringify(store.nodes.map((n) => [n.id, n.status, n.name, n.tags, n.addresses, n.problem]));
  if (s === sig.nodes) return;
  sig.nodes = s;
  const rows = store.nodes.map((n) => {
    const tr = h('tr', { class: n.id === store.local ? 'this-node' : null, 'data-node': n.id },
      h('td', null, h('b', null, n.name || n.id), n.id === store.local ? [' ', h('span', { class: 'badge local' }, 'this gateway')] : null,
        n.name && n.name !== n.id ? h('div', { class: 'muted small mono' }, n.id) : null),
      h('td', null, statusBadge(n.status), n.problem ? h('div', { class: 'bad-text small' }, n.problem) : null),
      h('td', null, (n.tags && n.tags.hardware_class) || h('span', { class: 'muted' }, 'unknown')),
      h('td', { class: 'mono small' }, (n.tags && n.tags.api_addr) || '–'),
      h('td', { class: 'mono small' }, (n.tags && n.tags.kv_addr) || '–'),
      h('td', { class: 'small' }, addresses(n)),
      h('td', { class: 'small' }, (n.tags && n.tags.version) || '–'));
    return tr;
  });
  swap(els.nodes, store.nodes.length ? table(['Node', 'Health', 'Hardware', 'API address', 'KV address', 'Addresses', 'Version'], rows, { label: 'Nodes', scroll: store.nodes.length > 16 })
    : h('p', { class: 'muted' }, store.error ? 'No data: ' + store.error.message : 'Loading…'));
}

function quality(q) {
  const m = h('span', { class: 'meter', 'aria-hidden': 'true' }, h('span'));
  m.firstChild.style.width = Math.round(q * 100) + '%';
  return h('span', { class: 'nowrap' }, m, ' ', q.toFixed(2));
}

function qualityColor(q) {
  return `hsl(${Math.round(120 * Math.max(0, Math.min(1, q)))} 65% 45%)`;
}

function renderPaths() {
  const p = store.paths;
  const ids = store.nodes.filter((n) => !n.problem).map((n) => n.id);
  if (!pathFrom || !ids.includes(pathFrom)) pathFrom = store.local || ids[0] || '';
  const s = JSON.stringify([p, ids, pathFrom]);
  if (s === sig.paths) return;
  sig.paths = s;
  if (!p) return swap(els.pathsBody, h('p', { class: 'muted' }, 'Loading…'));
  if (p.error) return swap(els.pathsBody, h('p', { class: 'error' }, 'The paths could not be read: ' + p.error));
  if (ids.length < 2) return swap(els.pathsBody, h('p', { class: 'muted' }, 'One node: no paths yet. Join other gateways to this one (--join) to see them.'));
  const byPair = new Map();
  for (const x of p.paths || []) byPair.set(x.from + '\u0000' + x.to, x);

  const select = h('select', { id: 'path-from', 'data-key': 'path-from', onchange: (e) => { pathFrom = e.target.value; renderPaths(); } },
    ids.map((id) => h('option', { value: id, selected: id === pathFrom }, nodeName(id) + (id === store.local ? ' (this gateway)' : ''))));
  const rows = ids.filter((id) => id !== pathFrom).map((to) => {
    const x = byPair.get(pathFrom + '\u0000' + to);
    if (!x) return [nodeName(to), h('span', { class: 'muted' }, 'no path known'), '', '', '', '', ''];
    return [nodeName(to), h('span', { class: 'mono' }, x.address || '–'), [x.kind, x.interface ? h('span', { class: 'muted' }, ` (${x.interface})`) : null],
      fmt.mbps(x.speed_mbps), x.rtt_known ? fmt.ms(x.rtt_ms) : h('span', { class: 'muted' }, 'not yet known'), quality(x.quality), x.direct ? 'yes' : 'routed'];
  });
  const pairs = table(['To', 'Address', 'Link kind', 'Speed', 'RTT', 'Quality', 'Same subnet'], rows,
    { label: 'Paths from ' + nodeName(pathFrom), scroll: ids.length > 16 });

  // The matrix: every pair at a glance, coloured by quality. Clicking a row's cell picks that row's node.
  const matrix = h('div', { class: 'matrix' + (ids.length > 32 ? ' dense' : ''), role: 'img',
    'aria-label': `Path quality between all ${ids.length} nodes; pick a node above to read its paths` });
  matrix.style.gridTemplateColumns = `repeat(${ids.length}, auto)`;
  const frag = document.createDocumentFragment();
  for (const a of ids) {
    for (const b of ids) {
      const cell = document.createElement('span');
      if (a === b) {
        cell.className = 'self';
      } else {
        const x = byPair.get(a + '\u0000' + b);
        if (x) {
          cell.style.background = qualityColor(x.quality);
          cell.title = `${nodeName(a)} → ${nodeName(b)}: ${x.kind}, ${fmt.mbps(x.speed_mbps)}, RTT ${x.rtt_known ? fmt.ms(x.rtt_ms) : 'unknown'}, quality ${x.quality.toFixed(2)}`;
        }
        cell.dataset.from = a;
      }
      frag.appendChild(cell);
    }
  }
  matrix.appendChild(frag);
  matrix.addEventListener('click', (e) => {
    const from = e.target.dataset && e.target.dataset.from;
    if (from) { pathFrom = from; renderPaths(); }
  });
  swap(els.pathsBody,
    h('div', { class: 'row' }, h('label', { for: 'path-from' }, 'Paths from'), select),
    pairs,
    h('details', { open: ids.length <= 32 },
      h('summary', null, `All pairs (${ids.length} × ${ids.length}): rows are from, columns to`),
      h('div', { class: 'legend' }, h('span', null, h('span', { class: 'swatch', 'data-q': '1' }), 'quality 1'),
        h('span', null, h('span', { class: 'swatch', 'data-q': '0.5' }), '0.5'), h('span', null, h('span', { class: 'swatch', 'data-q': '0' }), '0')),
      matrix));
  for (const sw of els.pathsBody.querySelectorAll('.swatch')) sw.style.background = qualityColor(Number(sw.dataset.q));
}

function ratio(st) {
  if (!st) return null;
  const n = st.prefix_hits + st.prefix_misses;
  return n ? st.prefix_hits / n : null;
}

// kvLayout is an instance's KV layout: layers × KV heads × head dim, and for a hybrid how many of the layers
// hold a fixed state per sequence instead of per-token KV, with its size.
function kvLayout(kv) {
  const shape = `${kv.layers}×${kv.kv_heads}×${kv.head_dim} ${kv.dtype}`;
  if (!kv.linear_layers) return shape;
  return h('span', { title: `${kv.layers - kv.linear_layers} attention layers hold ${fmt.bytes(kv.bytes_per_token)} per token; ` +
    `${kv.linear_layers} linear-attention layers hold ${fmt.bytes(kv.state_bytes || 0)} of state per sequence, sent once per transfer` },
  shape, h('div', { class: 'muted' }, `${kv.linear_layers} linear, ${fmt.bytes(kv.state_bytes || 0)} state`));
}

function kvCell(st) {
  if (!st) return h('span', { class: 'muted' }, store.stats && !store.stats.error ? 'not reported' : '…');
  if (!st.kv_capacity_bytes) return fmt.bytes(st.kv_bytes);
  const m = h('span', { class: 'meter', 'aria-hidden': 'true' }, h('span'));
  m.firstChild.style.width = Math.min(100, (100 * st.kv_bytes) / st.kv_capacity_bytes) + '%';
  return h('span', { class: 'nowrap' }, m, ` ${fmt.bytes(st.kv_bytes)} / ${fmt.bytes(st.kv_capacity_bytes)}`);
}

// speedCell shows what the instance's node measured of its speed (PD auto's cost model reads these): prompt
// tokens per second in the longest band measured, tokens out per second and the queue wait; the title has
// every band and the KV goodput measured into the instance from each prefill node.
function speedCell(sp) {
  if (!sp || !sp.samples) return h('span', { class: 'muted' }, 'not measured');
  const bands = (sp.prefill_tokens_per_second || []).filter((b) => b.tokens_per_second > 0);
  const top = bands[bands.length - 1];
  const range = (b) => (b.to_tokens ? `${b.from_tokens}–${b.to_tokens}` : `≥ ${b.from_tokens}`) + ' tokens';
  const title = [
    ...bands.map((b) => `prefill ${range(b)}: ${fmt.num(b.tokens_per_second, 0)} tok/s`),
    sp.decode_tokens_per_second ? `decode: ${fmt.num(sp.decode_tokens_per_second)} tok/s` : 'decode: not measured',
    `queue wait: ${fmt.ms(sp.queue_wait_ms)}`,
    ...(sp.kv_ingress || []).map((l) => `KV in from ${nodeName(l.from_node)}: ${fmt.bytes(l.bytes_per_second)}/s`),
    `${sp.samples} requests measured`,
  ].join('\n');
  return h('span', { class: 'nowrap speed', title },
    top ? `prefill ${fmt.num(top.tokens_per_second, 0)} tok/s` : 'prefill –',
    h('div', { class: 'muted small' }, sp.decode_tokens_per_second ? `decode ${fmt.num(sp.decode_tokens_per_second)} tok/s` : 'decode –'));
}

function renderInstances() {
  const f = filter.trim().toLowerCase();
  const list = store.instances.filter((i) => !f || [i.id, i.model, i.node, nodeName(i.node), i.status, i.role, i.backend]
    .some((v) => String(v || '').toLowerCase().includes(f)));
  const s = JSON.stringify([list, list.map((i) => statsOf(i.id)), store.stats && store.stats.error]);
  if (s === sig.instances) return;
  sig.instances = s;
  if (!store.instances.length) {
    return swap(els.instances, h('p', { class: 'muted' }, store.updated ? 'No instances: load a model below.' : 'Loading…'));
  }
  const rows = list.map((i) => {
    const st = statsOf(i.id);
    const r = ratio(st);
    return h('tr', { 'data-instance': i.id },
      h('td', null, h('span', { class: 'mono', title: i.id }, fmt.short(i.id, 14))),
      h('td', null, h('span', { class: 'model' }, i.model), i.quantization ? h('div', { class: 'muted small' }, i.quantization) : null),
      h('td', { class: 'nowrap' }, nodeName(i.node), i.node === store.local ? h('div', { class: 'muted small' }, 'this gateway') : null),
      h('td', null, h('span', { class: 'badge ' + (i.role === 'both' ? '' : i.role) }, i.role)),
      h('td', { class: 'nowrap' }, [i.engine, i.backend ? ` / ${i.backend}` : ''].join('')),
      h('td', null, statusBadge(i.status)),
      h('td', { class: 'num' }, `${i.load.in_flight} / ${i.load.queued}`),
      h('td', null, speedCell(i.speed)),
      h('td', null, kvCell(st)),
      h('td', { class: 'num' }, r === null ? h('span', { class: 'muted' }, st ? 'no lookups' : '–') : h('span', { title: `${st.prefix_hits} hits, ${st.prefix_misses} misses, ${st.prefix_hit_tokens} tokens reused` }, fmt.pct(r))),
      h('td', { class: 'small' }, i.kv ? kvLayout(i.kv) : h('span', { class: 'muted' }, 'no KV layout'),
        h('div', { class: 'mono muted' }, i.kv_endpoint || 'serves no KV')),
      h('td', null, h('button', { type: 'button', class: 'small danger', 'data-key': 'unload:' + i.id,
        'aria-label': `Unload ${i.model} (${i.id}) on ${nodeName(i.node)}`, onclick: () => unload(i) }, 'Unload')));
  });
  const errs = store.statsErrors.length ? h('p', { class: 'warn small' }, 'Engine figures missing for: ',
    store.statsErrors.map((n) => `${nodeName(n.node)} (${n.error})`).join('; ')) : null;
  swap(els.instances,
    list.length === store.instances.length ? null : h('p', { class: 'muted small' }, `${list.length} of ${store.instances.length} shown`),
    table(['Instance', 'Model', 'Node', 'Role', 'Engine', 'Status', { label: 'In flight / queued', num: true }, 'Measured speed', 'KV memory',
      { label: 'Prefix-cache hits', num: true }, 'KV layout / endpoint', ''], rows, { label: 'Instances', scroll: list.length > 20 }),
    errs,
    store.stats && store.stats.error ? h('p', { class: 'warn small' }, 'Engine figures could not be read: ' + store.stats.error) : null);
}

async function unload(i) {
  const yes = await ctx.confirmAction('Unload this instance?', `${i.model} (${i.id}) on ${nodeName(i.node)} stops serving; routes that name it stop using it.`, 'Unload');
  if (!yes) return;
  try {
    await api('DELETE', '/v1/instances/' + encodeURIComponent(i.id));
    ctx.showError(null);
    await refreshCore();
  } catch (err) {
    ctx.showError('Unloading ' + i.id + ' failed: ' + err.message);
  }
}

let nodeSelect = null;

function refreshNodeSelect() {
  if (!nodeSelect) return;
  const keep = nodeSelect.value;
  const ids = store.nodes.filter((n) => !n.problem && n.status === 'alive').map((n) => n.id);
  const have = [...nodeSelect.options].map((o) => o.value);
  if (JSON.stringify(ids) === JSON.stringify(have)) return;
  nodeSelect.replaceChildren(...ids.map((id) => h('option', { value: id, selected: id === (keep || store.local) }, nodeName(id) + (id === store.local ? ' (this gateway)' : ''))));
}

function loadForm() {
  const model = h('input', { type: 'text', id: 'load-model', required: true, placeholder: 'embedded, org/name or a model under --models-dir', size: 36 });
  nodeSelect = h('select', { id: 'load-node' });
  const role = h('select', { id: 'load-role' }, ['both', 'prefill', 'decode'].map((r) => h('option', { value: r }, r)));
  const id = h('input', { type: 'text', id: 'load-id', placeholder: 'optional', size: 12 });
  const opts = h('input', { type: 'text', id: 'load-options', placeholder: 'key=value, key=value', size: 24 });
  const msg = h('div', { id: 'load-msg', role: 'status', 'aria-live': 'polite' });
  const button = h('button', { type: 'submit', class: 'primary', id: 'load-submit' }, 'Load');
  const form = h('form', { class: 'panel', 'aria-labelledby': 'load-h', onsubmit: async (e) => {
    e.preventDefault();
    const options = {};
    for (const kv of opts.value.split(',').map((s) => s.trim()).filter(Boolean)) {
      const [k, ...v] = kv.split('=');
      if (!k || !v.length) {
        msg.replaceChildren(h('p', { class: 'error' }, `Option "${kv}" is not key=value.`));
        return;
      }
      options[k.trim()] = v.join('=').trim();
    }
    const body = { model: model.value.trim(), node: nodeSelect.value || undefined, role: role.value };
    if (id.value.trim()) body.id = id.value.trim();
    if (Object.keys(options).length) body.options = options;
    button.disabled = true;
    msg.replaceChildren(h('p', { class: 'note' }, `Loading ${body.model} on ${nodeName(body.node)}… (the instance shows as loading until it is ready)`));
    try {
      const ans = await api('POST', '/v1/instances', body);
      msg.replaceChildren(h('p', { class: 'note ok-text' }, `Loaded ${ans.model} as ${ans.id} on ${nodeName(ans.node)}.`));
      model.value = '';
      await refreshCore();
    } catch (err) {
      msg.replaceChildren(h('p', { class: 'error' }, 'The model was not loaded: ' + err.message));
    } finally {
      button.disabled = false;
    }
  } },
  h('h2', { id: 'load-h' }, 'Load a model'),
  h('div', { class: 'form-row' },
    h('div', { class: 'field' }, h('label', { for: 'load-model' }, 'Model'), model),
    h('div', { class: 'field' }, h('label', { for: 'load-node' }, 'Node'), nodeSelect),
    h('div', { class: 'field' }, h('label', { for: 'load-role' }, 'Role'), role),
    h('div', { class: 'field' }, h('label', { for: 'load-id' }, 'Instance id'), id),
    h('div', { class: 'field' }, h('label', { for: 'load-options' }, 'Engine options'), opts),
    button),
  msg);
  refreshNodeSelect();
  return form;
}
