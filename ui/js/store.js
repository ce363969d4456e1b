// The cluster as the dashboard last read it, refreshed every 3 s while the page is visible (as exo's page
// does), and the readers that only some views need: paths and engine figures (every 10 s, while a view wants
// them) and the recent requests (incremental, with ?since=).

import { api } from './api.js';

const listeners = new Set();

export const store = {
  local: '', // this gateway's node id
  nodes: [], // /state's members
  exposure: [], // /state's exposure: what this gateway leaves open to the network, in words
  instances: [], // /v1/instances
  links: [], // /v1/instance-links
  paths: null, // /admin/v1/paths
  stats: null, // /admin/v1/cluster/stats, by instance id
  statsErrors: [], // nodes whose figures could not be read
  requests: [], // /admin/v1/requests, oldest first
  requestsNode: '', // whose recent requests (empty: this gateway's)
  requestsLast: 0,
  error: null, // the last refresh's error, if it failed
  updated: 0, // Date.now() of the last good refresh
  version: 0, // bumps on every change
};

// perf records how long refreshes take, for the scale test and the curious (window.duetPerf).
export const perf = { firstData: 0, firstRender: 0, refreshes: [] };
window.duetPerf = perf;

export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function notify(what) {
  store.version++;
  for (const fn of listeners) {
    try { fn(what); } catch (err) { console.error(err); }
  }
}

const nodeNames = new Map();

// nodeName is a node's name, or its short id when it has none.
export function nodeName(id) {
  if (!id) return '';
  return nodeNames.get(id) || id;
}

export function instanceById(id) {
  return store.instances.find((i) => i.id === id);
}

let statsByID = new Map();
export function statsOf(id) { return statsByID.get(id); }

export async function refreshCore() {
  const t0 = performance.now();
  try {
    const [state, ins, links] = await Promise.all([
      api('GET', '/state', undefined, { interactive: false }),
      api('GET', '/v1/instances', undefined, { interactive: false }),
      api('GET', '/v1/instance-links', undefined, { interactive: false }),
    ]);
    store.local = state.local || '';
    store.nodes = state.nodes || [];
    store.exposure = Array.isArray(state.exposure) ? state.exposure : [];
    nodeNames.clear();
    for (const n of store.nodes) if (n.id) nodeNames.set(n.id, n.name || n.id);
    store.instances = (ins && ins.instances) || [];
    store.links = Array.isArray(links) ? links : [];
    store.error = null;
    store.updated = Date.now();
    const fetched = performance.now();
    if (!perf.firstData) perf.firstData = fetched;
    notify('core');
    perf.refreshes.push({ fetch: fetched - t0, render: performance.now() - fetched, at: Date.now() });
    if (perf.refreshes.length > 50) perf.refreshes.shift();
  } catch (err) {
    store.error = err;
    notify('error');
  }
}

export async function refreshPaths() {
  try {
    store.paths = await api('GET', '/admin/v1/paths', undefined, { interactive: false });
    notify('paths');
  } catch (err) {
    store.paths = { error: err.message, paths: [] };
    notify('paths');
  }
}

export async function refreshStats() {
  try {
    const ans = await api('GET', '/admin/v1/cluster/stats', undefined, { interactive: false });
    statsByID = new Map();
    store.statsErrors = [];
    for (const n of ans.nodes || []) {
      if (n.error) store.statsErrors.push(n);
      for (const i of n.instances || []) statsByID.set(i.id, i);
    }
    store.stats = ans;
    notify('stats');
  } catch (err) {
    store.stats = { error: err.message };
    notify('stats');
  }
}

const maxRequests = 512;

export async function refreshRequests() {
  const q = new URLSearchParams();
  if (store.requestsLast) q.set('since', String(store.requestsLast));
  if (store.requestsNode) q.set('node', store.requestsNode);
  const node = store.requestsNode;
  try {
    const ans = await api('GET', '/admin/v1/requests' + (q.size ? '?' + q : ''), undefined, { interactive: false });
    if (node !== store.requestsNode) return; // switched meanwhile
    if (ans.last < store.requestsLast) store.requests = []; // the gateway restarted: its seq began again
    const seen = new Set(store.requests.map((r) => r.seq));
    for (const r of ans.requests || []) if (!seen.has(r.seq)) store.requests.push(r);
    if (store.requests.length > maxRequests) store.requests.splice(0, store.requests.length - maxRequests);
    store.requestsLast = ans.last || 0;
    store.requestsError = null;
    notify('requests');
  } catch (err) {
    store.requestsError = err;
    notify('requests');
  }
}

export function setRequestsNode(node) {
  store.requestsNode = node;
  store.requests = [];
  store.requestsLast = 0;
  return refreshRequests();
}

// The poller: core every 3 s; the extras a view asked for (want) at their own pace. Nothing runs while the
// page is hidden; it catches up when it is shown again.
const wants = new Map(); // name -> count
export function want(name) {
  wants.set(name, (wants.get(name) || 0) + 1);
  kick(name);
  return () => wants.set(name, Math.max(0, (wants.get(name) || 1) - 1));
}

const every = { core: 3000, requests: 3000, paths: 10000, stats: 10000 };
const fns = { core: refreshCore, requests: refreshRequests, paths: refreshPaths, stats: refreshStats };
const last = {};
const running = {};

async function kick(name) {
  if (running[name]) return;
  running[name] = true;
  try { await fns[name](); } finally {
    running[name] = false;
    last[name] = Date.now();
  }
}

function tick() {
  if (document.hidden) return;
  const now = Date.now();
  for (const name of Object.keys(every)) {
    if (name !== 'core' && !wants.get(name)) continue;
    if (!last[name] || now - last[name] >= every[name]) kick(name);
  }
}

export function start() {
  kick('core');
  setInterval(tick, 500);
  document.addEventListener('visibilitychange', tick);
}
