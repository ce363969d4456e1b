// P/D routes: exo's instance links (which prefill instances serve which decode instances) as cards, an editor
// that gives each instance a Prefill or Decode role, and duet's checks: the gateway's own verdict on a pair
// before it is saved (KV that cannot be shared is refused with the API's reason; approximate pairs, across
// quantizations, are marked), and for each route the share of its requests prefilled remotely and why the
// others were not.

import { api } from '../api.js';
import { debounce, fmt, h, swap } from '../dom.js';
import { baseModel, family, routeStats } from '../stats.js';
import { instanceById, nodeName, refreshCore, store, want } from '../store.js';

export const title = 'P/D routes';

let ctx = null;
let els = null;
let unwant = null;
let editing = null; // { id: 'new' | link id, prefill: Set, decode: Set }
let check = { state: 'idle' };
let checkSeq = 0;
let saving = false;
let editorError = '';
let pickFilter = '';
let sig = { list: '', editor: '' };

export function mount(root, c) {
  ctx = c;
  sig = { list: '', editor: '' };
  els = { list: h('div'), editor: h('div'), status: h('p', { class: 'visually-hidden', role: 'status', 'aria-live': 'polite' }) };
  const newButton = h('button', { type: 'button', class: 'primary', id: 'new-route', onclick: () => startEdit(null) }, '+ New route');
  els.newButton = newButton;
  root.append(
    h('h1', null, 'Prefill / decode routes'),
    h('div', { class: 'explain' },
      h('div', null, h('h3', null, h('span', { class: 'badge prefill' }, 'Prefill')),
        h('p', null, 'Reads the whole prompt at once and builds its KV cache. Compute-bound: give it the node with the most compute.')),
      h('div', null, h('h3', null, h('span', { class: 'badge decode' }, 'Decode')),
        h('p', null, 'Generates the answer token by token from the KV cache. Memory-bandwidth-bound: give it the node with the fastest memory.')),
      h('div', null, h('h3', null, 'A route'),
        h('p', null, 'Links prefill instances to decode instances. Requests are decoded on a decode instance; a prompt with enough uncached tokens is prefilled on a linked prefill instance and its KV cache streams to the decoder. Short prompts, or any failure, are prefilled locally, and each answer\'s timings say why.'))),
    els.status,
    h('section', { class: 'panel', 'aria-labelledby': 'routes-h' },
      h('div', { class: 'panel-head' }, h('h2', { id: 'routes-h' }, 'Routes'), newButton),
      els.list),
    els.editor,
  );
  unwant = want('requests');
  update('core');
}

export function unmount() {
  if (unwant) unwant();
  unwant = null;
  els = null;
}

export function update(what) {
  if (!els) return;
  if (what === 'core' || what === 'requests' || what === 'error') renderList();
  if (what === 'core') renderEditor();
}

function announce(msg) { if (els) els.status.textContent = msg; }

function chip(id) {
  const i = instanceById(id);
  if (!i) {
    return h('li', { class: 'chip' }, h('div', { class: 'model bad-text' }, 'missing instance'),
      h('div', { class: 'where mono' }, id + ' is no longer in the cluster'));
  }
  return h('li', { class: 'chip', 'data-instance': id },
    h('div', { class: 'model', title: i.model }, baseModel(i.model) || i.model),
    h('div', { class: 'where' }, `${nodeName(i.node)} · `, h('span', { class: 'mono', title: id }, fmt.short(id, 10)),
      ` · ${family(i)}${i.quantization ? ' ' + i.quantization : ''} · `, h('span', { class: 'badge ' + i.status }, i.status)));
}

function families(ids) {
  const out = new Set();
  for (const id of ids) {
    const i = instanceById(id);
    if (i) out.add(family(i));
  }
  return [...out];
}

function statsBlock(link) {
  const st = routeStats(link, store.requests);
  const who = store.requestsNode ? nodeName(store.requestsNode) : 'this gateway';
  if (!st.total && !st.failed && !st.stopped) {
    return h('div', { class: 'route-stats muted' }, `No request decoded by this route among the recent requests of ${who} yet.`);
  }
  const reasons = Object.entries(st.fallbacks).sort((a, b) => b[1] - a[1]);
  return h('div', { class: 'route-stats' },
    h('p', null, h('b', null, `${fmt.pct(st.share)} prefilled remotely`), ` (${st.remote} of ${st.total} recent requests decoded by this route, seen by ${who})`,
      st.approximate ? h('span', { class: 'warn-text' }, ` · ${st.approximate} with approximate KV`) : null,
      st.failed ? h('span', { class: 'bad-text' }, ` · ${st.failed} failed`) : null,
      st.stopped ? h('span', { class: 'muted' }, ` · ${st.stopped} stopped by their client`) : null),
    st.local || st.cache ? h('p', { class: 'muted' }, `${st.local} prefilled locally without trying (prompt under the threshold)` + (st.cache ? `, ${st.cache} from the prefix cache` : '')) : null,
    reasons.length ? h('div', null, 'Fell back to a local prefill:', h('ul', null, reasons.map(([r, n]) => h('li', null, `${r} — ${n}×`)))) : null);
}

function renderList() {
  const s = JSON.stringify([store.links, store.instances.map((i) => [i.id, i.model, i.node, i.status, i.architecture, i.quantization]), store.requests.length, store.requestsLast, !!editing, store.error && store.error.message]);
  if (s === sig.list) return;
  sig.list = s;
  els.newButton.disabled = !!editing;
  if (!store.updated) return swap(els.list, h('p', { class: 'muted' }, store.error ? 'No data: ' + store.error.message : 'Loading…'));
  if (!store.links.length) {
    return swap(els.list, h('p', { class: 'muted' }, 'No routes yet. Create one to prefill long prompts on one instance and decode them on another.'));
  }
  const cards = store.links.map((l) => {
    const fams = families([...l.prefill_instances, ...l.decode_instances]);
    return h('article', { class: 'route-card', 'data-link': l.link_id, 'aria-label': 'Route ' + l.link_id },
      h('div', { class: 'row' },
        l.exact ? h('span', { class: 'badge ok', title: 'Every pair has the same KV layout and weights' }, 'exact KV')
          : h('span', { class: 'badge warn', title: 'Some pairs cross quantizations of one model: answers may differ slightly from a single node\'s' }, 'approximate KV (cross-quantization)'),
        h('span', { class: 'muted small mono' }, l.link_id)),
      fams.length > 1 ? h('p', { class: 'warn' }, `Mixed model families: ${fams.join(', ')}.`) : null,
      h('div', { class: 'route' },
        h('div', null, h('span', { class: 'badge prefill' }, 'PREFILL'), h('ul', { class: 'chips' }, l.prefill_instances.map(chip))),
        h('div', { class: 'arrow', 'aria-hidden': 'true' }, '→'),
        h('div', null, h('span', { class: 'badge decode' }, 'DECODE'), h('ul', { class: 'chips' }, l.decode_instances.map(chip)))),
      statsBlock(l),
      h('div', { class: 'actions' },
        h('button', { type: 'button', 'data-key': 'edit:' + l.link_id, disabled: !!editing, onclick: () => startEdit(l) }, 'Edit'),
        h('button', { type: 'button', class: 'danger', 'data-key': 'remove:' + l.link_id, onclick: () => remove(l) }, 'Remove')));
  });
  swap(els.list, cards);
}

function startEdit(link) {
  editing = link ? { id: link.link_id, prefill: new Set(link.prefill_instances), decode: new Set(link.decode_instances) }
    : { id: 'new', prefill: new Set(), decode: new Set() };
  editorError = '';
  check = { state: 'idle' };
  sig.list = '';
  renderList();
  renderEditor(true);
  runCheck();
  const first = els.editor.querySelector('h2');
  if (first) first.focus();
}

function stopEdit() {
  editing = null;
  editorError = '';
  sig.list = '';
  renderList();
  renderEditor(true);
}

function roleOf(id) {
  if (editing.prefill.has(id)) return 'prefill';
  if (editing.decode.has(id)) return 'decode';
  return 'none';
}

function setRole(id, role) {
  editing.prefill.delete(id);
  editing.decode.delete(id);
  if (role === 'prefill') editing.prefill.add(id);
  if (role === 'decode') editing.decode.add(id);
  editorError = '';
  check = { state: editing.prefill.size && editing.decode.size ? 'checking' : 'idle' };
  renderEditor(true);
  runCheckSoon();
  const i = instanceById(id);
  announce(`${i ? baseModel(i.model) + ' on ' + nodeName(i.node) : id}: ${role === 'none' ? 'not in the route' : role}`);
}

// runCheck asks the gateway whether the route would be accepted, without writing it.
async function runCheck() {
  if (!editing || !editing.prefill.size || !editing.decode.size) {
    check = { state: 'idle' };
    renderEditor(true);
    return;
  }
  const seq = ++checkSeq;
  const body = { prefill_instances: [...editing.prefill], decode_instances: [...editing.decode] };
  check = { state: 'checking' };
  renderEditor(true);
  try {
    const ans = await api('POST', '/admin/v1/instance-links/check', body);
    if (seq !== checkSeq || !editing) return;
    check = ans.ok ? { state: 'ok', exact: ans.exact } : { state: 'bad', message: ans.message };
  } catch (err) {
    if (seq !== checkSeq || !editing) return;
    check = { state: 'unknown', message: err.message };
  }
  renderEditor(true);
  announce(check.state === 'ok' ? (check.exact ? 'The gateway accepts this route.' : 'The gateway accepts this route, with approximate KV.') : 'The gateway refuses this route: ' + (check.message || ''));
}
const runCheckSoon = debounce(runCheck, 150);

function canSave() {
  return editing && editing.prefill.size > 0 && editing.decode.size > 0 && !saving && check.state !== 'bad' && check.state !== 'checking';
}

async function save() {
  if (!canSave()) return;
  const body = { prefill_instances: [...editing.prefill], decode_instances: [...editing.decode] };
  saving = true;
  renderEditor(true);
  try {
    if (editing.id === 'new') await api('POST', '/v1/instance-links', body);
    else await api('PUT', '/v1/instance-links/' + encodeURIComponent(editing.id), body);
    saving = false;
    const wasNew = editing.id === 'new';
    stopEdit();
    await refreshCore();
    announce(wasNew ? 'Route created.' : 'Route saved.');
    const b = document.getElementById('new-route');
    if (b) b.focus();
  } catch (err) {
    saving = false;
    editorError = err.message;
    renderEditor(true);
  }
}

async function remove(link) {
  const names = (ids) => ids.map((id) => { const i = instanceById(id); return i ? `${baseModel(i.model)} on ${nodeName(i.node)}` : id; }).join(', ');
  const yes = await ctx.confirmAction('Remove this route?', `Prefill on ${names(link.prefill_instances)} for decode on ${names(link.decode_instances)}. Requests keep being served; long prompts are prefilled where they are decoded.`);
  if (!yes) return;
  try {
    await api('DELETE', '/v1/instance-links/' + encodeURIComponent(link.link_id));
    if (editing && editing.id === link.link_id) stopEdit();
    ctx.showError(null);
    await refreshCore();
    announce('Route removed.');
  } catch (err) {
    ctx.showError('Removing the route failed: ' + err.message);
  }
}

// unsupported says why an instance cannot take a role, or '' when it can.
function unsupported(i, role) {
  if (role === 'prefill' && !i.kv_endpoint) return 'serves no KV (its engine runs no KV wire server), so it cannot prefill for others';
  if (!i.kv) return 'reports no KV layout: its engine cannot exchange KV caches';
  return '';
}

function pickCard(i) {
  const role = roleOf(i.id);
  const noPrefill = unsupported(i, 'prefill');
  const noKV = unsupported(i, 'decode');
  const label = `${baseModel(i.model)} on ${nodeName(i.node)}`;
  const btn = (r, text, disabled) => h('button', {
    type: 'button', class: r, 'aria-pressed': String(role === r), disabled: disabled && role !== r,
    'data-key': `role:${i.id}:${r}`, title: disabled ? 'Not possible: ' + disabled : null,
    onclick: () => setRole(i.id, r),
  }, text);
  return h('div', { class: 'pick' + (role === 'prefill' ? ' as-prefill' : role === 'decode' ? ' as-decode' : ''), 'data-instance': i.id },
    h('div', { class: 'model', title: i.model }, h('b', null, baseModel(i.model) || i.model)),
    h('div', { class: 'small muted' }, `${nodeName(i.node)} · `, h('span', { class: 'mono', title: i.id }, fmt.short(i.id, 12)),
      ` · ${family(i)}${i.quantization ? ' ' + i.quantization : ''} · ${i.backend || i.engine} · `, h('span', { class: 'badge ' + i.status }, i.status)),
    noKV ? h('p', { class: 'why' }, '⚠ ' + noKV) : noPrefill ? h('p', { class: 'why' }, 'Decode only: ' + noPrefill) : null,
    i.status !== 'ready' ? h('p', { class: 'why' }, `⚠ ${i.status}: it serves no requests now`) : null,
    h('div', { class: 'toggle', role: 'group', 'aria-label': 'Role of ' + label },
      btn('none', '–', ''), btn('prefill', 'Prefill', noPrefill), btn('decode', 'Decode', '')));
}

function checkLine() {
  if (!editing.prefill.size || !editing.decode.size) {
    return h('p', { class: 'check muted', id: 'route-check' }, 'Pick at least one prefill and one decode instance.');
  }
  switch (check.state) {
    case 'checking': return h('p', { class: 'check muted', id: 'route-check' }, 'Checking with the gateway…');
    case 'ok': return check.exact
      ? h('p', { class: 'check ok-text', id: 'route-check' }, '✓ The gateway accepts this route: every pair shares its KV layout exactly.')
      : h('p', { class: 'check warn-text', id: 'route-check' }, '≈ The gateway accepts this route with approximate KV: some pairs cross quantizations of one model, so answers may differ slightly from a single node\'s.');
    case 'bad': return h('p', { class: 'check bad-text', id: 'route-check', role: 'alert' }, '✗ The gateway refuses this route: ' + check.message);
    case 'unknown': return h('p', { class: 'check warn-text', id: 'route-check' }, 'The route could not be checked (' + check.message + '); saving will check it.');
  }
  return h('p', { class: 'check muted', id: 'route-check' }, '');
}

function renderEditor(force) {
  if (!els) return;
  if (!editing) {
    sig.editor = '';
    return swap(els.editor);
  }
  const s = JSON.stringify(store.instances.map((i) => [i.id, i.model, i.node, i.status, i.kv_endpoint, !!i.kv, i.architecture]));
  if (!force && s === sig.editor) return;
  sig.editor = s;
  const chosen = [...editing.prefill, ...editing.decode];
  const fams = families(chosen);
  const bases = new Set(chosen.map((id) => instanceById(id)).filter(Boolean).map((i) => baseModel(i.model)));
  const f = pickFilter.trim().toLowerCase();
  const list = store.instances.slice().sort((a, b) => a.model.localeCompare(b.model) || nodeName(a.node).localeCompare(nodeName(b.node)))
    .filter((i) => !f || roleOf(i.id) !== 'none' || [i.model, i.id, i.node, nodeName(i.node)].some((v) => String(v).toLowerCase().includes(f)));
  const gone = chosen.filter((id) => !instanceById(id));
  const filterInput = h('input', { type: 'search', id: 'pick-filter', 'data-key': 'pick-filter', value: pickFilter, placeholder: 'model or node',
    oninput: (e) => { pickFilter = e.target.value; renderEditor(true); } });
  swap(els.editor, h('section', { class: 'panel editor', 'aria-labelledby': 'editor-h' },
    h('h2', { id: 'editor-h', tabindex: '-1' }, editing.id === 'new' ? 'New route' : 'Edit route ' + editing.id),
    fams.length > 1 ? h('p', { class: 'warn' }, `⚠ The chosen instances span several model families (${fams.join(', ')}): their KV caches cannot be exchanged.`)
      : bases.size > 1 ? h('p', { class: 'warn' }, `⚠ Different models of one family (${[...bases].join(', ')}): the gateway checks whether their KV fits.`) : null,
    gone.length ? h('p', { class: 'warn' }, `⚠ No longer in the cluster: ${gone.join(', ')}. Set them to – or save without them.`) : null,
    h('p', { class: 'muted' }, 'Give each instance a role: ', h('b', null, 'Prefill'), ' serves KV caches, ', h('b', null, 'Decode'), ' uses them; – leaves it out.'),
    store.instances.length > 12 ? h('div', { class: 'row' }, h('label', { for: 'pick-filter' }, 'Filter'), filterInput) : null,
    store.instances.length ? h('div', { class: 'picker' }, [...list.map(pickCard), ...gone.map((id) => pickCard({ id, model: id, node: '', status: 'unavailable', kv: null }))])
      : h('p', { class: 'muted' }, 'No instances: load a model on the Cluster page first.'),
    checkLine(),
    editorError ? h('p', { class: 'error', role: 'alert', id: 'route-error' }, 'Not saved: ' + editorError) : null,
    h('div', { class: 'actions' },
      h('button', { type: 'button', class: 'primary', id: 'save-route', 'data-key': 'save', disabled: !canSave(), onclick: save }, saving ? 'Saving…' : 'Save route'),
      h('button', { type: 'button', id: 'cancel-route', 'data-key': 'cancel', disabled: saving, onclick: stopEdit }, 'Cancel'))));
}
