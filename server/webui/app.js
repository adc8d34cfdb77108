/*
 * app.js - the chat page's behaviour (index.html): the conversation and
 * settings in localStorage, a streamed chat request to this server's own
 * /v1/chat/completions read as server-sent events, the answer drawn as it
 * grows (thinking folded, tool calls labelled), Stop aborting the fetch
 * (the server aborts the request when its client goes), and the API key
 * asked for when the server answers 401. No framework, no build step.
 */
'use strict';

const $ = (id) => document.getElementById(id);
const STORE = { chat: 'nanovllm.chat', settings: 'nanovllm.settings', key: 'nanovllm.apiKey' };
const DEFAULTS = { system: '', temperature: 0.7, maxTokens: 1024, thinking: true };

let messages = load(STORE.chat, []);
let settings = { ...DEFAULTS, ...load(STORE.settings, {}) };
let model = null;      /* from GET /v1/models */
let controller = null; /* the request in flight, for Stop */
let afterKey = null;   /* what to retry once a key is entered */

function load(name, fallback) {
  try {
    const v = JSON.parse(localStorage.getItem(name));
    return v ?? fallback;
  } catch {
    return fallback; /* a damaged entry: start afresh rather than not at all */
  }
}

function save() {
  localStorage.setItem(STORE.chat, JSON.stringify(messages));
  localStorage.setItem(STORE.settings, JSON.stringify(settings));
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = localStorage.getItem(STORE.key);
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

/* The JSON error's message, whatever the body turns out to be. */
async function errorText(res) {
  const text = await res.text();
  try {
    return JSON.parse(text).error.message;
  } catch {
    return `${res.status} ${res.statusText}${text ? `: ${text.slice(0, 200)}` : ''}`;
  }
}

function askKey(reason, retry) {
  afterKey = retry;
  $('key-reason').textContent = reason;
  $('key').value = localStorage.getItem(STORE.key) || '';
  $('key-dialog').hidden = false;
  $('key').focus();
}

function status(text, isError = false) {
  $('status').textContent = text;
  $('status').className = isError ? 'error' : '';
}

async function loadModel() {
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    if (res.status === 401) return askKey('This server needs an API key.', loadModel);
    if (!res.ok) return status(await errorText(res), true);
    model = (await res.json()).data[0].id;
    $('model').textContent = model;
    status('');
  } catch (e) {
    status(`cannot reach the server: ${e.message}`, true);
  }
}

/* ---- drawing ---------------------------------------------------------------------------- */

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawMessage(m, node = el('div')) {
  node.className = `msg ${m.role}`;
  node.replaceChildren(el('div', 'role', m.role));
  if (m.reasoning) {
    const d = el('details', 'reasoning');
    d.open = !!m.reasoningOpen;
    d.addEventListener('toggle', () => { m.reasoningOpen = d.open; });
    d.append(el('summary', null, m.content || m.toolCalls?.length ? 'Thinking' : 'Thinking…'),
             el('div', null, m.reasoning));
    node.append(d);
  }
  node.append(el('div', 'content', m.content || ''));
  for (const call of m.toolCalls || []) {
    const box = el('div', 'tool-call');
    box.append(el('div', 'label', `Tool call: ${call.name}`), el('pre', null, call.arguments));
    node.append(box);
  }
  if (m.error) node.append(el('div', 'error', m.error));
  if (m.finish) node.append(el('div', 'finish', m.finish));
  return node;
}

function drawAll() {
  $('messages').replaceChildren(...messages.map((m) => drawMessage(m)));
  scrollDown();
}

function scrollDown() {
  const box = $('messages');
  box.scrollTop = box.scrollHeight;
}

function setBusy(busy) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
  $('input').disabled = busy;
}

/* ---- the request -------------------------------------------------------------------------- */

function requestBody() {
  const history = messages.slice(0, -1) /* not the empty answer being written */
    .filter((m) => m.role === 'user' || m.content)
    .map((m) => ({ role: m.role, content: m.content }));
  if (settings.system) history.unshift({ role: 'system', content: settings.system });
  return {
    model,
    messages: history,
    stream: true,
    temperature: Number(settings.temperature),
    max_tokens: Number(settings.maxTokens),
    chat_template_kwargs: { enable_thinking: !!settings.thinking },
  };
}

/* One SSE event's JSON chunk folded into the answer. */
function apply(answer, chunk) {
  if (chunk.error) {
    answer.error = chunk.error.message;
    return;
  }
  const choice = chunk.choices?.[0];
  if (!choice) return;
  const d = choice.delta || {};
  const thought = d.reasoning_content ?? d.reasoning;
  if (thought) answer.reasoning = (answer.reasoning || '') + thought;
  if (d.content) answer.content += d.content;
  for (const tc of d.tool_calls || []) {
    answer.toolCalls = answer.toolCalls || [];
    const call = (answer.toolCalls[tc.index ?? 0] ??= { name: '', arguments: '' });
    if (tc.function?.name) call.name += tc.function.name;
    if (tc.function?.arguments) call.arguments += tc.function.arguments;
  }
  if (choice.finish_reason) answer.finish = `finished: ${choice.finish_reason}`;
}

async function send(text) {
  if (!model) return loadModel();
  messages.push({ role: 'user', content: text });
  const answer = { role: 'assistant', content: '' };
  messages.push(answer);
  save();
  drawAll();
  const node = $('messages').lastElementChild;
  controller = new AbortController();
  setBusy(true);
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(requestBody()), signal: controller.signal,
    });
    if (!res.ok) {
      answer.error = await errorText(res);
      if (res.status === 401) askKey('The API key was refused: enter it again, then resend.', null);
      return;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value.replace(/\r\n/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (data !== '[DONE]') apply(answer, JSON.parse(data));
        }
      }
      drawMessage(answer, node);
      scrollDown();
    }
  } catch (e) {
    if (e.name === 'AbortError') answer.finish = 'stopped';
    else answer.error = `the request failed: ${e.message}`;
  } finally {
    controller = null;
    setBusy(false);
    save();
    drawMessage(answer, node);
    scrollDown();
    $('input').focus();
  }
}

/* ---- wiring ------------------------------------------------------------------------------- */

function showSettings() {
  $('system').value = settings.system;
  $('temperature').value = settings.temperature;
  $('max-tokens').value = settings.maxTokens;
  $('thinking').checked = settings.thinking;
}

function readSettings() {
  const num = (v, fallback) => (v === '' || Number.isNaN(Number(v)) ? fallback : Number(v));
  settings = {
    system: $('system').value,
    temperature: num($('temperature').value, DEFAULTS.temperature),
    maxTokens: Math.max(1, Math.round(num($('max-tokens').value, DEFAULTS.maxTokens))),
    thinking: $('thinking').checked,
  };
  save();
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value.trim();
  if (!text || controller) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $('composer').requestSubmit();
  }
});
$('stop').addEventListener('click', () => controller?.abort());
$('new-chat').addEventListener('click', () => {
  controller?.abort();
  messages = [];
  save();
  drawAll();
});
for (const id of ['system', 'temperature', 'max-tokens', 'thinking'])
  $(id).addEventListener('change', readSettings);
$('change-key').addEventListener('click', () => askKey('The API key for this server (empty: none).', loadModel));
$('key-form').addEventListener('submit', (e) => {
  e.preventDefault();
  const key = $('key').value.trim();
  if (key) localStorage.setItem(STORE.key, key);
  else localStorage.removeItem(STORE.key);
  $('key-dialog').hidden = true;
  const retry = afterKey;
  afterKey = null;
  if (retry) retry();
});

showSettings();
drawAll();
loadModel();
