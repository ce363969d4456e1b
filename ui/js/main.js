// The dashboard's shell: the tabs (one view module each, chosen by the URL's #/name), the error banner, the
// key and confirmation dialogs, the theme, and the poller.

import { setKey, setKeyPrompt } from './api.js';
import { h } from './dom.js';
import { perf, start, store, subscribe } from './store.js';
import * as cluster from './views/cluster.js';
import * as routes from './views/routes.js';
import * as chat from './views/chat.js';
import * as requests from './views/requests.js';
import * as settings from './views/settings.js';

const views = { cluster, routes, chat, requests, settings };
const main = document.getElementById('main');
let current = null; // { name, view, root }

// showError puts a message in the banner at the top (role=alert); null clears it. A message of the poller
// ('poll') goes away by itself once the gateway answers again; a view's stays until dismissed or replaced.
let bannerSource = '';
function showError(msg, source = 'view') {
  const b = document.getElementById('banner');
  document.getElementById('banner-text').textContent = msg || '';
  b.hidden = !msg;
  bannerSource = msg ? source : '';
}

document.getElementById('banner-close').addEventListener('click', () => showError(null));

// confirmAction asks with the confirmation dialog; it resolves to true on "yes".
function confirmAction(title, text, yes = 'Remove') {
  const d = document.getElementById('confirm-dialog');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-yes').textContent = yes;
  d.returnValue = '';
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'yes'), { once: true });
    d.showModal();
    document.getElementById('confirm-no').focus();
  });
}

// The key dialog: api.js opens it when the gateway answers 401, or 403 for a write that needs the admin key.
const keyDialog = document.getElementById('key-dialog');
const keyInput = document.getElementById('key-input');
setKeyPrompt((reason, admin) => new Promise((resolve) => {
  document.getElementById('key-title').textContent = admin ? 'Admin key' : 'API key';
  document.getElementById('key-why').textContent = reason || 'This gateway needs a key.';
  keyInput.value = '';
  let given = false;
  const form = document.getElementById('key-form');
  const onSubmit = () => {
    const v = keyInput.value.trim();
    if (v) {
      setKey(v);
      given = true;
    }
  };
  form.addEventListener('submit', onSubmit, { once: true });
  keyDialog.addEventListener('close', () => {
    form.removeEventListener('submit', onSubmit);
    resolve(given);
  }, { once: true });
  keyDialog.showModal();
  keyInput.focus();
}));
document.getElementById('key-cancel').addEventListener('click', () => keyDialog.close());

// Theme: auto (the system's), light or dark, remembered in localStorage (no secret in it).
function applyTheme(theme) {
  const t = theme || localStorage.getItem('duet.theme') || 'auto';
  if (t === 'auto') delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = t;
  localStorage.setItem('duet.theme', t);
  window.dispatchEvent(new Event('duet-theme'));
}
applyTheme();

function route() {
  const name = (location.hash.replace(/^#\/?/, '').split(/[/?]/)[0]) || 'cluster';
  const view = views[name] || views.cluster;
  const key = views[name] ? name : 'cluster';
  if (current && current.name === key) return;
  if (current && current.view.unmount) current.view.unmount();
  for (const a of document.querySelectorAll('#nav a')) {
    if (a.dataset.view === key) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const root = h('div', { class: 'view', 'data-view': key });
  main.replaceChildren(root);
  current = { name: key, view, root };
  document.title = `duet · ${view.title}`;
  view.mount(root, { showError, confirmAction, applyTheme });
  if (current.focus) main.focus();
  current.focus = true;
}

window.addEventListener('hashchange', () => {
  route();
  main.focus();
});

// The exposure banner says what this gateway leaves open to the network (no API key, admin writes, no
// cluster secret), as duet logs it at start; it stays while that holds.
const exposure = document.getElementById('exposure');
let exposureShown = '';
function showExposure(lines) {
  const text = lines.join('\n');
  if (text === exposureShown) return;
  exposureShown = text;
  document.getElementById('exposure-text').replaceChildren(...lines.map((l) => h('li', null, l)));
  exposure.hidden = !lines.length;
}

const conn = document.getElementById('conn');
subscribe((what) => {
  if (what === 'error' && store.error) {
    conn.textContent = 'Not connected';
    conn.classList.add('bad');
    showError(`Refreshing the dashboard failed, retrying every 3 s: ${store.error.message}`, 'poll');
  } else if (what === 'core') {
    conn.classList.remove('bad');
    const alive = store.nodes.filter((n) => n.status === 'alive').length;
    conn.textContent = `${store.local ? 'node ' + (store.nodes.find((n) => n.id === store.local)?.name || store.local) + ' · ' : ''}${alive} of ${store.nodes.length} nodes alive · updated ${new Date(store.updated).toLocaleTimeString([], { hour12: false })}`;
    if (bannerSource === 'poll') showError(null);
    showExposure(store.exposure);
  }
  if (current && current.view.update) {
    current.view.update(what);
    if (what === 'core' && !perf.firstRender) perf.firstRender = performance.now();
  }
});

route();
start();
