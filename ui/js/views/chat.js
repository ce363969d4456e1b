// Chat: a playground against any model the cluster serves, streamed, with a stop button and sampling
// settings; under each answer its timeline (queue, routing, remote prefill, first token, decode, and the nodes
// it ran on), from the timings the gateway puts in the stream's last chunk.

import { api, ApiError, streamChat } from '../api.js';
import { h, replace } from '../dom.js';
import { timeline } from '../timeline.js';

export const title = 'Chat';

// The conversation survives switching tabs (not reloading: nothing is stored).
const convo = { messages: [], turns: [] }; // turns: {role, text, el?, timings, usage, requestID, error}
const settings = { model: '', system: '', temperature: '0.7', top_p: '1', max_tokens: '256', seed: '', ignore_eos: false };
let els = null;
let controller = null;

export function mount(root) {
  const model = h('select', { id: 'chat-model', onchange: (e) => { settings.model = e.target.value; } });
  const num = (id, label, key, attrs) => h('div', { class: 'field' }, h('label', { for: id }, label),
    h('input', { type: 'number', id, value: settings[key], ...attrs, oninput: (e) => { settings[key] = e.target.value; } }));
  const system = h('textarea', { id: 'chat-system', rows: '3', placeholder: 'optional', oninput: (e) => { settings.system = e.target.value; } });
  system.value = settings.system;
  const input = h('textarea', { id: 'chat-input', rows: '4', placeholder: 'Write a message. Ctrl+Enter (⌘+Enter) sends.',
    'aria-describedby': 'chat-hint', onkeydown: (e) => { if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(); } } });
  const sendB = h('button', { type: 'submit', class: 'primary', id: 'chat-send' }, 'Send');
  const stopB = h('button', { type: 'button', id: 'chat-stop', disabled: true, onclick: stop }, 'Stop');
  const clearB = h('button', { type: 'button', id: 'chat-clear', onclick: clear }, 'New conversation');
  els = {
    model, input, sendB, stopB, clearB,
    log: h('div', { class: 'chat-log', id: 'chat-log', role: 'log', 'aria-label': 'Conversation', 'aria-live': 'polite' }),
    error: h('div', { id: 'chat-error' }),
    status: h('p', { class: 'visually-hidden', role: 'status', 'aria-live': 'polite' }),
  };
  root.append(
    h('h1', null, 'Chat'),
    h('div', { class: 'chat' },
      h('aside', { class: 'panel', 'aria-labelledby': 'chat-settings-h' },
        h('h2', { id: 'chat-settings-h' }, 'Settings'),
        h('div', { class: 'stack' },
          h('div', { class: 'field' }, h('label', { for: 'chat-model' }, 'Model'), model),
          h('div', { class: 'field' }, h('label', { for: 'chat-system' }, 'System prompt'), system),
          num('chat-temperature', 'Temperature', 'temperature', { min: '0', max: '2', step: '0.1' }),
          num('chat-top-p', 'Top p', 'top_p', { min: '0', max: '1', step: '0.05' }),
          num('chat-max-tokens', 'Max tokens', 'max_tokens', { min: '1', step: '1' }),
          num('chat-seed', 'Seed', 'seed', { step: '1', placeholder: 'random' }),
          h('label', { class: 'row' }, h('input', { type: 'checkbox', id: 'chat-ignore-eos', checked: settings.ignore_eos,
            onchange: (e) => { settings.ignore_eos = e.target.checked; } }), 'Ignore end of sequence'),
          h('p', { class: 'muted small' }, 'Generates max tokens whatever the model says: for measuring decode speed.'))),
      h('section', { class: 'panel', 'aria-labelledby': 'chat-h' },
        h('h2', { id: 'chat-h', class: 'visually-hidden' }, 'Conversation'),
        els.log,
        els.error,
        h('form', { class: 'composer', onsubmit: (e) => { e.preventDefault(); send(); } },
          h('label', { for: 'chat-input', class: 'visually-hidden' }, 'Message'),
          input,
          h('p', { id: 'chat-hint', class: 'muted small' }, 'Ctrl+Enter sends · the answer streams in · Stop ends it early. Long prompts on a model with a P/D route are prefilled remotely: the timeline under the answer shows where.'),
          h('div', { class: 'actions' }, sendB, stopB, clearB)),
        els.status)));
  renderLog();
  loadModels();
  setBusy(!!controller);
}

export function unmount() { els = null; }
export function update() {}

async function loadModels() {
  try {
    const ans = await api('GET', '/v1/models');
    if (!els) return;
    const ids = (ans.data || []).map((m) => m.id);
    if (!settings.model || !ids.includes(settings.model)) settings.model = ids[0] || '';
    replace(els.model, ids.length ? ids.map((id) => h('option', { value: id, selected: id === settings.model }, id))
      : h('option', { value: '' }, 'no model is served'));
  } catch (err) {
    if (els) replace(els.error, h('p', { class: 'error', role: 'alert' }, 'The models could not be listed: ' + err.message));
  }
}

function setBusy(busy) {
  if (!els) return;
  els.sendB.disabled = busy;
  els.stopB.disabled = !busy;
  els.clearB.disabled = busy;
}

function clear() {
  convo.messages = [];
  convo.turns = [];
  renderLog();
  replace(els.error);
  els.input.focus();
}

function stop() {
  if (controller) controller.abort();
}

function turnEl(turn) {
  const text = h('div', { class: 'text' + (turn.role === 'user' && turn.text.length > 600 ? ' clamp' : '') }, turn.text);
  const box = h('article', { class: 'msg ' + turn.role, 'aria-label': turn.role === 'user' ? 'You' : 'Assistant' },
    h('div', { class: 'who' }, turn.role === 'user' ? 'You' : 'Assistant' + (turn.model ? ' · ' + turn.model : '')),
    turn.reasoning ? h('details', null, h('summary', null, 'Reasoning'), h('div', { class: 'text' }, turn.reasoning)) : null,
    text);
  turn.textEl = text;
  turn.el = box;
  if (turn.role === 'assistant') fillFooter(turn);
  return box;
}

function fillFooter(turn) {
  const old = turn.el.querySelector('.answer-foot');
  if (old) old.remove();
  const foot = h('div', { class: 'answer-foot' });
  if (turn.streaming) foot.append(h('p', { class: 'muted small' }, 'Streaming…'));
  if (turn.stopped) foot.append(h('p', { class: 'warn small' }, 'Stopped: the generation was cancelled on the gateway.'));
  if (turn.error) foot.append(h('p', { class: 'error', role: 'alert' }, turn.error));
  if (turn.timings) foot.append(timeline(turn.timings, turn.usage, { seen: turn.seen }));
  if (turn.requestID) {
    foot.append(h('p', { class: 'muted small' }, 'Request id ', h('span', { class: 'mono' }, turn.requestID),
      turn.finish ? ` · finished: ${turn.finish}` : '', ' · ', h('a', { href: '#/requests' }, 'recent requests')));
  }
  turn.el.append(foot);
}

function renderLog() {
  if (!els) return;
  replace(els.log, convo.turns.length ? convo.turns.map(turnEl) : h('p', { class: 'muted' }, 'No messages yet.'));
  els.log.scrollTop = els.log.scrollHeight;
}

async function send() {
  if (controller || !els) return;
  const text = els.input.value;
  if (!text.trim()) {
    replace(els.error, h('p', { class: 'error', role: 'alert' }, 'Write a message first.'));
    return;
  }
  if (!settings.model) {
    replace(els.error, h('p', { class: 'error', role: 'alert' }, 'No model to talk to: load one on the Cluster page.'));
    return;
  }
  replace(els.error);
  const body = { model: settings.model, stream: true, stream_options: { include_usage: true }, messages: [] };
  if (settings.system.trim()) body.messages.push({ role: 'system', content: settings.system });
  body.messages.push(...convo.messages, { role: 'user', content: text });
  const numOr = (v, parse) => (v === '' || v === null || Number.isNaN(parse(v)) ? undefined : parse(v));
  body.temperature = numOr(settings.temperature, parseFloat);
  body.top_p = numOr(settings.top_p, parseFloat);
  body.max_tokens = numOr(settings.max_tokens, (v) => parseInt(v, 10));
  body.seed = numOr(settings.seed, (v) => parseInt(v, 10));
  if (settings.ignore_eos) body.ignore_eos = true;

  const user = { role: 'user', text };
  const answer = { role: 'assistant', text: '', model: settings.model, streaming: true };
  convo.turns.push(user, answer);
  els.input.value = '';
  renderLog();
  controller = new AbortController();
  setBusy(true);
  els.status.textContent = 'Answer streaming.';
  const t0 = performance.now();
  try {
    answer.requestID = await streamChat(body, (chunk) => {
      const c = chunk.choices && chunk.choices[0];
      if (c && c.delta) {
        if (c.delta.content) {
          if (!answer.seen) answer.seen = { ttft: performance.now() - t0 };
          answer.text += c.delta.content;
          if (answer.textEl) answer.textEl.textContent = answer.text;
        }
        if (c.delta.reasoning_content) answer.reasoning = (answer.reasoning || '') + c.delta.reasoning_content;
      }
      if (c && c.finish_reason) answer.finish = c.finish_reason;
      if (chunk.timings) answer.timings = chunk.timings;
      if (chunk.usage) answer.usage = {
        prompt_tokens: chunk.usage.prompt_tokens, completion_tokens: chunk.usage.completion_tokens,
        cached_tokens: (chunk.usage.prompt_tokens_details && chunk.usage.prompt_tokens_details.cached_tokens) || 0,
      };
      if (els) els.log.scrollTop = els.log.scrollHeight;
    }, controller.signal);
    convo.messages.push({ role: 'user', content: text }, { role: 'assistant', content: answer.text });
    if (els) els.status.textContent = 'Answer complete.';
  } catch (err) {
    if (err && err.name === 'AbortError') {
      answer.stopped = true;
      convo.messages.push({ role: 'user', content: text }, { role: 'assistant', content: answer.text });
      if (els) els.status.textContent = 'Answer stopped.';
    } else {
      answer.error = (err instanceof ApiError ? '' : 'Unexpected error: ') + (err && err.message ? err.message : String(err));
      if (!answer.text) {
        convo.turns.pop();
        convo.turns.pop();
        if (els) {
          els.input.value = text; // nothing was answered: the message can be sent again
          replace(els.error, h('p', { class: 'error', role: 'alert', id: 'chat-error-text' }, 'The message was not answered: ' + answer.error));
        }
      }
    }
  } finally {
    answer.streaming = false;
    answer.seen = answer.seen || null;
    if (answer.seen) answer.seen.total = performance.now() - t0;
    controller = null;
    setBusy(false);
    if (els) {
      if (answer.el && convo.turns.includes(answer)) fillFooter(answer);
      else renderLog();
      els.log.scrollTop = els.log.scrollHeight;
    }
  }
}
