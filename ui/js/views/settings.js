// Settings: the key this tab uses, the router in use (and swapping it), the model aliases, the feature flags,
// this gateway's plugins, and the theme.

import { api, askKey, getKey, setKey } from '../api.js';
import { h, replace, table } from '../dom.js';
import { aliasLines, parseAliases } from '../stats.js';
import { refreshCore } from '../store.js';

export const title = 'Settings';

let els = null;
let ctx = null;

export function mount(root, c) {
  ctx = c;
  els = { key: h('div'), router: h('div'), flags: h('div'), status: h('div'),
    aliases: h('textarea', { id: 'aliases-text', rows: 5, cols: 60, spellcheck: 'false', placeholder: 'claude-opus-5-5=embedded' }),
    aliasesMsg: h('div', { id: 'aliases-msg', role: 'status', 'aria-live': 'polite' }) };
  const routerInput = h('input', { type: 'text', id: 'router-name', list: 'router-names', placeholder: 'a registered router: router-disagg, roundrobin…', size: 34, required: true });
  const sha = h('input', { type: 'text', id: 'router-sha', placeholder: 'optional, for an external plugin', size: 30 });
  const routerMsg = h('div', { id: 'router-msg', role: 'status', 'aria-live': 'polite' });
  const theme = localStorage.getItem('duet.theme') || 'auto';
  root.append(
    h('h1', null, 'Settings'),
    h('div', { class: 'grid-2' },
      h('section', { class: 'panel', 'aria-labelledby': 'key-h' }, h('h2', { id: 'key-h' }, 'API key'), els.key),
      h('section', { class: 'panel', 'aria-labelledby': 'theme-h' }, h('h2', { id: 'theme-h' }, 'Theme'),
        h('div', { class: 'row', role: 'radiogroup', 'aria-labelledby': 'theme-h' }, ['auto', 'light', 'dark'].map((t) =>
          h('label', { class: 'row' }, h('input', { type: 'radio', name: 'theme', value: t, checked: t === theme,
            onchange: () => ctx.applyTheme(t) }), t === 'auto' ? 'as the system' : t))))),
    h('section', { class: 'panel', 'aria-labelledby': 'router-h' },
      h('h2', { id: 'router-h' }, 'Router'),
      els.router,
      h('form', { onsubmit: async (e) => {
        e.preventDefault();
        const body = { router: routerInput.value.trim() };
        if (sha.value.trim()) body.sha256 = sha.value.trim();
        replace(routerMsg, h('p', { class: 'note' }, `Starting ${body.router}… requests keep using the current router until it is ready.`));
        try {
          const ans = await api('PUT', '/admin/v1/router', body);
          replace(routerMsg, h('p', { class: 'note ok-text' }, `${ans.router}: ${ans.message}.`));
          loadRouter();
        } catch (err) {
          replace(routerMsg, h('p', { class: 'error' }, err.message));
        }
      } },
      h('datalist', { id: 'router-names' }, h('option', { value: 'router-disagg' }), h('option', { value: 'roundrobin' })),
      h('div', { class: 'form-row' },
        h('div', { class: 'field' }, h('label', { for: 'router-name' }, 'Swap to'), routerInput),
        h('div', { class: 'field' }, h('label', { for: 'router-sha' }, 'SHA-256'), sha),
        h('button', { type: 'submit', class: 'primary', id: 'router-swap' }, 'Swap router')),
      h('p', { class: 'muted small' }, 'Only this gateway swaps its router, to one its operator registered at start (built-in, --router, --plugin-dir); needs the admin key when one is set.'),
      routerMsg)),
    h('section', { class: 'panel', 'aria-labelledby': 'aliases-h' },
      h('h2', { id: 'aliases-h' }, 'Model aliases'),
      h('form', { onsubmit: saveAliases },
        h('div', { class: 'field' }, h('label', { for: 'aliases-text' }, 'One NAME=MODEL a line: requests for NAME go to the served MODEL'), els.aliases),
        h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary', id: 'aliases-save' }, 'Save aliases')),
        h('p', { class: 'muted small' }, 'Coding agents ask for their vendor\'s models (Claude Code for claude-opus-5-5 and a claude-haiku-*, Codex for gpt-5-codex): point those names at a model this cluster serves. Only this gateway\'s aliases; needs the admin key when one is set.'),
        els.aliasesMsg)),
    h('div', { class: 'grid-2' },
      h('section', { class: 'panel', 'aria-labelledby': 'flags-h' }, h('h2', { id: 'flags-h' }, 'Feature flags'), els.flags),
      h('section', { class: 'panel', 'aria-labelledby': 'status-h' }, h('h2', { id: 'status-h' }, 'This gateway'), els.status)),
  );
  renderKey();
  loadRouter();
  loadAliases();
  loadFlags();
  loadStatus();
}

export function unmount() { els = null; }
export function update() {}

function renderKey() {
  if (!els) return;
  const has = !!getKey();
  replace(els.key,
    h('p', null, has ? 'This tab sends a key with every call (kept in sessionStorage: it is gone when the tab closes).'
      : 'No key: this gateway is used without one. If it asks for one, the page asks you.'),
    h('p', { class: 'muted small' }, 'A gateway started with --admin-key needs that key for changes (loading models, routes, the router); the page asks for it when a change is refused.'),
    h('div', { class: 'actions' },
      h('button', { type: 'button', id: 'key-change', onclick: async () => {
        await askKey('Enter the API key or the admin key of this gateway.', false);
        renderKey();
        refreshCore();
        loadRouter();
        loadFlags();
        loadStatus();
      } }, has ? 'Change key' : 'Enter a key'),
      has ? h('button', { type: 'button', id: 'key-forget', onclick: () => { setKey(''); renderKey(); } }, 'Forget key') : null));
}

async function loadRouter() {
  try {
    const ans = await api('GET', '/admin/v1/router', undefined, { interactive: false });
    if (!els) return;
    replace(els.router, h('p', null, 'In use: ', h('b', { id: 'router-current' }, ans.router || 'unknown')));
    const names = document.getElementById('router-names');
    if (names && Array.isArray(ans.available)) names.replaceChildren(...ans.available.map((n) => h('option', { value: n })));
  } catch (err) {
    if (els) replace(els.router, h('p', { class: 'error' }, 'The router could not be read: ' + err.message));
  }
}

async function loadAliases() {
  try {
    const ans = await api('GET', '/admin/v1/model-aliases', undefined, { interactive: false });
    if (els) els.aliases.value = aliasLines(ans.aliases);
  } catch (err) {
    if (els) replace(els.aliasesMsg, h('p', { class: 'error' }, 'The model aliases could not be read: ' + err.message));
  }
}

async function saveAliases(e) {
  e.preventDefault();
  try {
    const ans = await api('PUT', '/admin/v1/model-aliases', { aliases: parseAliases(els.aliases.value) });
    if (!els) return;
    els.aliases.value = aliasLines(ans.aliases);
    const n = Object.keys(ans.aliases || {}).length;
    replace(els.aliasesMsg, h('p', { class: 'note ok-text' }, `${n} alias${n === 1 ? '' : 'es'} in use.`));
  } catch (err) {
    if (els) replace(els.aliasesMsg, h('p', { class: 'error' }, err.message));
  }
}

async function loadFlags() {
  try {
    const ans = await api('GET', '/v1/feature-flags', undefined, { interactive: false });
    if (els) replace(els.flags, table(['Flag', 'Value'], Object.entries(ans).map(([k, v]) => [h('code', null, k), String(v)]), { label: 'Feature flags' }));
  } catch (err) {
    if (els) replace(els.flags, h('p', { class: 'error' }, 'The feature flags could not be read: ' + err.message));
  }
}

async function loadStatus() {
  try {
    const st = await api('GET', '/admin/v1/status', undefined, { interactive: false });
    if (!els) return;
    const plugins = Array.isArray(st.plugins) ? st.plugins : [];
    replace(els.status,
      h('p', null, `${st.in_flight} generations in flight, ${st.queued} queued, ${(st.instances || []).length} local instances.`),
      plugins.length ? table(['Plugin', 'State', 'PID', 'Restarts', 'Last error'], plugins.map((p) =>
        [p.name, h('span', { class: 'badge ' + (p.state === 'running' ? 'ok' : 'warn') }, p.state), String(p.pid || '–'), String(p.restarts || 0),
          p.last_error || h('span', { class: 'muted' }, 'none')]), { label: 'Plugins' }) : null);
  } catch (err) {
    if (els) replace(els.status, h('p', { class: 'error' }, 'The gateway\'s status could not be read: ' + err.message));
  }
}
