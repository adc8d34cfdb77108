// The chat page at / (server/webui/) driven in a real headless Chromium (Debian's
// /usr/bin/chromium, or $CHROMIUM) through puppeteer-core, against a running `nanovllm serve`
// on the tiny random-weight model: its text is noise, so the checks are about the page's
// behaviour - streaming, stop, storage, settings, tool calls, the API key - not about words.
//
// Usage: node tests/e2e/webui.mjs PORT MODEL_NAME KEY_PORT API_KEY OUT_DIR
//   PORT: a server without a key; KEY_PORT: one started with --api-key API_KEY;
//   OUT_DIR: where the screenshots go (their paths are printed).
// One line per check, "ok N" last; exit status 1 at the first failure.
import puppeteer from 'puppeteer-core';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';

const [port, model, keyPort, apiKey, outDir] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
const keyBase = `http://127.0.0.1:${keyPort}`;
const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
if (!existsSync(executablePath)) {
  console.log(`FAIL no browser at ${executablePath}: apt-get install chromium (scripts/setup.sh)`);
  process.exit(1);
}

let checks = 0;
let browser;
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
    await browser?.close();
    process.exit(1);
  }
  checks++;
  console.log(`pass ${name} [${((Date.now() - t0) / 1000).toFixed(1)} s]`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* The last answer's text (thinking, content and tool calls): what the user sees grow. */
const answerText = (page) => page.$eval('#messages', (m) => m.lastElementChild?.innerText ?? '');
const answerContent = (page) =>
  page.$eval('#messages', (m) => m.lastElementChild?.querySelector('.content')?.textContent ?? '');

async function setField(page, selector, value) {
  await page.$eval(selector, (e, v) => {
    e.value = v;
    e.dispatchEvent(new Event('change'));
  }, String(value));
}

async function openSettings(page) {
  await page.$eval('#settings', (d) => { d.open = true; });
}

async function type(page, text) {
  await page.type('#input', text);
  await page.keyboard.press('Enter');
}

/* Waits for the answer in flight to end: Send is back. */
async function waitIdle(page, timeout = 60000) {
  await page.waitForSelector('#send:not([hidden])', { timeout });
}

async function metric(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`nanovllm:${name}{`));
  return line ? Number(line.split(' ').pop()) : NaN;
}

browser = await puppeteer.launch({
  executablePath,
  headless: true,
  // root in a container has no user namespace sandbox to give
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
const page = await browser.newPage();
await page.setViewport({ width: 1000, height: 800 });
const problems = [];
const foreign = [];
page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
page.on('console', (m) => { if (m.type() === 'error') problems.push(`console: ${m.text()}`); });
page.on('request', (r) => { if (!r.url().startsWith(base) && !r.url().startsWith('data:')) foreign.push(r.url()); });
const bodies = [];
page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(r.postData())); });

await check('load: /, its script and style, the model name from /v1/models, nothing from elsewhere', async () => {
  const res = await page.goto(base + '/', { waitUntil: 'networkidle0' });
  assert.equal(res.status(), 200);
  await page.waitForFunction((m) => document.getElementById('model').textContent === m, { timeout: 10000 }, model);
  const styled = await page.$eval('#send', (b) => getComputedStyle(b).backgroundColor);
  assert.equal(styled, 'rgb(37, 99, 235)', 'style.css applied');
  assert.deepEqual(foreign, []);
  assert.deepEqual(problems, []);
});

await check('send: the answer streams in (it grows between observations), then finishes', async () => {
  await openSettings(page);
  await setField(page, '#max-tokens', 200);
  await setField(page, '#system', 'Be brief.');
  await page.$eval('#thinking', (c) => { c.checked = false; c.dispatchEvent(new Event('change')); });
  // Every redraw of the answer is recorded inside the page: polling from here saw a whole
  // answer in one look on a fast CPU (200 tokens of the tiny model take ~0.1 s there).
  await page.$eval('#messages', (box) => {
    window.seenLengths = [];
    new MutationObserver(() => {
      const n = box.lastElementChild?.querySelector('.content')?.textContent.length ?? 0;
      if (n > 0 && n !== window.seenLengths.at(-1)) window.seenLengths.push(n);
    }).observe(box, { childList: true, subtree: true, characterData: true });
  });
  await type(page, 'Hello there');
  await waitIdle(page);
  const seen = await page.evaluate(() => window.seenLengths);
  assert.ok(seen.length >= 2, `the text grew in steps, seen lengths ${seen}`);
  for (let i = 1; i < seen.length; i++) assert.ok(seen[i] > seen[i - 1], `only grows: ${seen}`);
  const final = await answerText(page);
  assert.match(final, /finished: length/);
  assert.ok((await answerContent(page)).length >= seen.at(-1));
  const users = await page.$$eval('.msg.user', (m) => m.map((e) => e.querySelector('.content').textContent));
  assert.deepEqual(users, ['Hello there']);
});

await check('settings: the request carries stream, max_tokens, the system prompt and enable_thinking', async () => {
  const body = bodies.at(-1);
  assert.equal(body.stream, true);
  assert.equal(body.max_tokens, 200);
  assert.equal(body.model, model);
  assert.deepEqual(body.messages[0], { role: 'system', content: 'Be brief.' });
  assert.deepEqual(body.chat_template_kwargs, { enable_thinking: false });
  await page.$eval('#thinking', (c) => { c.checked = true; c.dispatchEvent(new Event('change')); });
  await setField(page, '#max-tokens', 4);
  await setField(page, '#temperature', 0.3);
  await type(page, 'Think, then answer');
  await waitIdle(page);
  const body2 = bodies.at(-1);
  assert.deepEqual(body2.chat_template_kwargs, { enable_thinking: true });
  assert.equal(body2.temperature, 0.3);
  assert.equal(body2.max_tokens, 4);
  // the conversation goes back to the server: system, two user turns, the first answer
  assert.deepEqual(body2.messages.map((m) => m.role), ['system', 'user', 'assistant', 'user']);
});

await check('stop: a long answer stops growing, the page says so and the server aborts the request', async () => {
  const closedBefore = await metric('http_client_closed_total');
  await page.$eval('#thinking', (c) => { c.checked = false; c.dispatchEvent(new Event('change')); });
  await setField(page, '#max-tokens', 1500);
  await type(page, 'Tell me a very long story');
  await page.waitForFunction(() => {
    const c = document.querySelector('#messages').lastElementChild.querySelector('.content');
    return c && c.textContent.length > 30;
  }, { timeout: 30000 });
  await page.click('#stop');
  await waitIdle(page, 5000);
  const atStop = await answerContent(page);
  await sleep(1500);
  assert.equal(await answerContent(page), atStop, 'no growth after Stop');
  assert.match(await answerText(page), /stopped/);
  for (let i = 0; i < 100 && !(await metric('http_client_closed_total') > closedBefore); i++) await sleep(50);
  assert.ok(await metric('http_client_closed_total') > closedBefore, 'the server counted the client leaving');
  for (let i = 0; i < 100 && (await metric('num_requests_running')) !== 0; i++) await sleep(50);
  assert.equal(await metric('num_requests_running'), 0, 'nothing left running');
});

await check('tool calls: a forced call streams into a labelled block with its name and arguments', async () => {
  // The page sends no tools; the test adds one (and forces it) on the way out. The
  // request is made the same every run: the question alone (not the random-weight
  // answers before it) and greedy, so what the model writes inside the forced call
  // cannot change from one run to the next (sampled, a run once wrote no call).
  await page.setRequestInterception(true);
  const addTools = (r) => {
    if (!r.url().endsWith('/v1/chat/completions')) return r.continue();
    const body = JSON.parse(r.postData());
    body.tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
      properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false } } }];
    body.tool_choice = 'required';
    body.parallel_tool_calls = false;
    body.max_tokens = 100;
    body.temperature = 0;
    body.messages = body.messages.slice(-1);
    body.chat_template_kwargs = { enable_thinking: false };
    r.continue({ postData: JSON.stringify(body) });
  };
  page.on('request', addTools);
  await type(page, 'Weather in Paris?');
  await waitIdle(page);
  page.off('request', addTools);
  await page.setRequestInterception(false);
  const label = await page.$eval('#messages', (m) => m.lastElementChild.querySelector('.tool-call .label').textContent);
  assert.equal(label, 'Tool call: get_weather');
  const args = await page.$eval('#messages', (m) => m.lastElementChild.querySelector('.tool-call pre').textContent);
  assert.equal(typeof JSON.parse(args).city, 'string');
  assert.match(await answerText(page), /finished: tool_calls/);
});

await check('thinking: reasoning deltas go into a folded block (a recorded stream: the tiny model never thinks in tags)', async () => {
  await page.setRequestInterception(true);
  const chunk = (delta, finish = null) => `data: ${JSON.stringify({ id: 'chatcmpl-x', object: 'chat.completion.chunk',
    created: 0, model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const replay = (r) => {
    if (!r.url().endsWith('/v1/chat/completions')) return r.continue();
    r.respond({ status: 200, contentType: 'text/event-stream', body: chunk({ role: 'assistant', content: '' }) +
      chunk({ reasoning_content: 'The user greets; ' }) + chunk({ reasoning_content: 'greet back.' }) +
      chunk({ content: 'Hi!' }) + chunk({}, 'stop') + 'data: [DONE]\n\n' });
  };
  page.on('request', replay);
  await type(page, 'Hi');
  await waitIdle(page);
  page.off('request', replay);
  await page.setRequestInterception(false);
  const d = await page.$eval('#messages', (m) => {
    const det = m.lastElementChild.querySelector('details.reasoning');
    return det && { open: det.open, summary: det.querySelector('summary').textContent, text: det.querySelector('div').textContent };
  });
  assert.deepEqual(d, { open: false, summary: 'Thinking', text: 'The user greets; greet back.' });
  assert.equal(await answerContent(page), 'Hi!');
});

await check('errors: the server\'s JSON error message is shown', async () => {
  await setField(page, '#max-tokens', 100000);
  await type(page, 'Too long');
  await waitIdle(page);
  const err = await page.$eval('#messages', (m) => m.lastElementChild.querySelector('.error')?.textContent);
  assert.match(err ?? '', /maximum context length is 2048 tokens/);
  // the browser logs every failed fetch; that one was the point
  assert.deepEqual(problems.splice(0), ['console: Failed to load resource: the server responded with a status of 400 (Bad Request)']);
  await setField(page, '#max-tokens', 48);
});

let transcript;
await check('reload: the conversation and settings come back from local storage', async () => {
  transcript = await page.$$eval('.msg', (ms) => ms.map((m) => m.innerText));
  assert.equal(transcript.length, 12);
  await page.reload({ waitUntil: 'networkidle0' });
  assert.deepEqual(await page.$$eval('.msg', (ms) => ms.map((m) => m.innerText)), transcript);
  assert.equal(await page.$eval('#max-tokens', (e) => e.value), '48');
  assert.equal(await page.$eval('#system', (e) => e.value), 'Be brief.');
  await page.screenshot({ path: `${outDir}/webui-desktop.png` });
  console.log(`screenshot ${outDir}/webui-desktop.png`);
});

await check('phone: at 375x667 nothing overflows sideways and the composer fits', async () => {
  await page.setViewport({ width: 375, height: 667, isMobile: true, hasTouch: true });
  await page.reload({ waitUntil: 'networkidle0' });
  const m = await page.evaluate(() => ({
    doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,
    send: document.getElementById('send').getBoundingClientRect().right,
    input: document.getElementById('input').getBoundingClientRect().width,
  }));
  assert.ok(m.doc <= 375 && m.body <= 375, `page width ${m.doc}/${m.body} at 375`);
  assert.ok(m.send <= 375, `Send at ${m.send}`);
  assert.ok(m.input >= 200, `the input is ${m.input} px wide`);
  await page.screenshot({ path: `${outDir}/webui-phone.png` });
  console.log(`screenshot ${outDir}/webui-phone.png`);
});

await check('new chat: the conversation is cleared, also from storage', async () => {
  await page.click('#new-chat');
  assert.equal(await page.$$eval('.msg', (ms) => ms.length), 0);
  assert.equal(await page.evaluate(() => localStorage.getItem('nanovllm.chat')), '[]');
  assert.deepEqual(problems, []);
});

await check('api key: the page asks for it, a wrong one is asked again, the right one is sent and works', async () => {
  const ctx = await browser.createBrowserContext(); // its own local storage
  const p = await ctx.newPage();
  const auth = [];
  p.on('request', (r) => { if (r.url().includes('/v1/')) auth.push(r.headers().authorization); });
  await p.goto(keyBase + '/', { waitUntil: 'networkidle0' });
  await p.waitForSelector('#key-dialog:not([hidden])', { timeout: 10000 });
  await p.type('#key', 'wrong');
  await p.click('#key-form button');
  await p.waitForSelector('#key-dialog:not([hidden])', { timeout: 10000 });
  await p.$eval('#key', (e) => { e.value = ''; });
  await p.type('#key', apiKey);
  await p.click('#key-form button');
  await p.waitForFunction((m) => document.getElementById('model').textContent === m, { timeout: 10000 }, model);
  assert.equal(await p.$eval('#key-dialog', (d) => d.hidden), true);
  await p.$eval('#max-tokens', (e) => { e.value = '8'; e.dispatchEvent(new Event('change')); });
  await p.type('#input', 'Hi');
  await p.keyboard.press('Enter');
  await p.waitForSelector('#send:not([hidden])', { timeout: 60000 });
  const text = await p.$eval('#messages', (m) => m.lastElementChild.innerText);
  assert.match(text, /finished: length/);
  assert.equal(auth.at(-1), `Bearer ${apiKey}`);
  assert.ok(auth.includes('Bearer wrong'));
  await p.screenshot({ path: `${outDir}/webui-key.png` });
  await ctx.close();
});

await browser.close();
console.log(`ok ${checks}`);
