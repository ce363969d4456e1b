// Calls to this gateway's API, with the key the user gave (kept in sessionStorage, this tab only), and errors
// that say what happened and what to do. Every URL is relative: the page talks to its own gateway only.

const KEY = 'duet.apiKey';

export function getKey() {
  try { return sessionStorage.getItem(KEY) || ''; } catch { return ''; }
}

export function setKey(k) {
  try {
    if (k) sessionStorage.setItem(KEY, k);
    else sessionStorage.removeItem(KEY);
  } catch { /* storage disabled: the key lives as long as the page */ }
  memoryKey = k;
}

let memoryKey = '';
function currentKey() { return getKey() || memoryKey; }

// ApiError is a failed call: status 0 when the gateway did not answer.
export class ApiError extends Error {
  constructor(status, message, code = '', param = '') {
    super(message);
    this.status = status;
    this.code = code;
    this.param = param;
  }
}

// errorOf turns an answer that is not 2xx into an ApiError with the gateway's own message.
export function errorOf(status, data, text) {
  const e = data && typeof data === 'object' ? data.error : null;
  let msg = (e && (e.message || (typeof e === 'string' ? e : ''))) || (text || '').trim().slice(0, 400);
  if (!msg) msg = `the gateway answered ${status} with no explanation`;
  const code = (e && e.code) || '';
  if (status === 401) msg += ' Enter a valid API key (Settings → API key).';
  if (status === 403 && code === 'admin_key_required') msg += ' Enter the admin key to make this change.';
  if (status === 429) msg += ' The gateway is at capacity; try again in a moment.';
  return new ApiError(status, msg, code, (e && e.param) || '');
}

function headers(json) {
  const h = {};
  const k = currentKey();
  if (k) h.Authorization = 'Bearer ' + k;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

// raw sends one request and returns the Response; a network failure is an ApiError with status 0.
export async function raw(method, path, body, signal) {
  try {
    return await fetch(path, {
      method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body),
      signal, cache: 'no-store', credentials: 'omit',
    });
  } catch (err) {
    if (err && err.name === 'AbortError') throw err;
    throw new ApiError(0, `The gateway at ${location.host} did not answer (${method} ${path}): is duet still running?`, 'network');
  }
}

async function once(method, path, body, signal) {
  const resp = await raw(method, path, body, signal);
  const text = await resp.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!resp.ok) throw errorOf(resp.status, data, text);
  if (data === null && text) throw new ApiError(resp.status, `${method} ${path} answered something that is not JSON.`);
  return data;
}

// keyPrompt is set by main.js: it asks the user for a key and resolves to whether one was given.
let keyPrompt = async () => false;
export function setKeyPrompt(fn) { keyPrompt = fn; }

let pending = null;
// askKey asks once for all the callers that need a key at the same time.
export function askKey(reason, admin) {
  if (!pending) pending = keyPrompt(reason, admin).finally(() => { pending = null; });
  return pending;
}

// api calls the gateway and decodes its JSON. When it needs a key (401) or the admin key (403) and the call is
// interactive, it asks for one and tries once more; background refreshes ask only for a missing API key.
export async function api(method, path, body, { signal, interactive = true } = {}) {
  try {
    return await once(method, path, body, signal);
  } catch (err) {
    if (!(err instanceof ApiError)) throw err;
    const admin = err.status === 403 && err.code === 'admin_key_required';
    if (err.status !== 401 && !(admin && interactive)) throw err;
    if (!interactive && currentKey()) throw err;
    const given = await askKey(err.message, admin);
    if (!given) throw err;
    return once(method, path, body, signal);
  }
}

// streamChat posts a streamed chat completion and calls onEvent with each decoded SSE data object. It returns
// the response's request id. An error before the stream starts is an ApiError, with the same key handling as
// api().
export async function streamChat(body, onEvent, signal) {
  let resp = await raw('POST', '/v1/chat/completions', body, signal);
  if (resp.status === 401) {
    const text = await resp.text();
    let data = null;
    try { data = JSON.parse(text); } catch { /* not JSON */ }
    const err = errorOf(401, data, text);
    if (!(await askKey(err.message, false))) throw err;
    resp = await raw('POST', '/v1/chat/completions', body, signal);
  }
  const requestID = resp.headers.get('X-Request-Id') || '';
  if (!resp.ok) {
    const text = await resp.text();
    let data = null;
    try { data = JSON.parse(text); } catch { /* not JSON */ }
    throw errorOf(resp.status, data, text);
  }
  const type = resp.headers.get('Content-Type') || '';
  if (!type.startsWith('text/event-stream')) {
    throw new ApiError(resp.status, `The gateway answered a stream request with ${type || 'no content type'}.`);
  }
  const reader = resp.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (err) {
      if (err && err.name === 'AbortError') throw err;
      throw new ApiError(0, 'The stream broke off before the answer was complete (the gateway or the connection went away).', 'network');
    }
    if (chunk.done) break;
    buf += dec.decode(chunk.value, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, i);
      buf = buf.slice(i + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return requestID;
        let obj;
        try { obj = JSON.parse(data); } catch { continue; }
        if (obj && obj.error) {
          const err = errorOf(obj.error.status || 500, obj, '');
          err.message = 'The answer broke off: ' + err.message;
          throw err;
        }
        onEvent(obj);
      }
    }
  }
  return requestID;
}
