// End-to-end proof of `POST /v1/responses` in `nanovllm serve` through real clients: the
// official OpenAI SDK's responses.create / .stream / .parse and the OpenAI Agents SDK over the
// Responses API (its default). Checked against OpenAI's documented shapes: output items
// `message` (with `output_text` parts) and `function_call` {call_id, name, arguments}, the
// typed stream events (response.created, response.in_progress, response.output_item.added,
// response.content_part.added, response.output_text.delta/.done,
// response.function_call_arguments.delta/.done, response.content_part.done,
// response.output_item.done, then response.completed or response.incomplete), each with its
// sequence_number; a stream must assemble to the non-streamed response.
//
// Usage: node tests/e2e/responses.mjs PORT MODEL_NAME [API_KEY]
//
// The tiny random model writes nothing sensible on its own, so calls and objects are forced
// (tool_choice required / named, text.format json_schema) and thinking is turned off
// (chat_template_kwargs, or reasoning.effort "none"), as the Qwen3 template thinks first.
// Temperature 0 throughout. One line per check, "ok N" last; exit status 1 at the first
// failure.
import OpenAI from 'openai';
import { zodTextFormat } from 'openai/helpers/zod';
import { Agent, run, tool as agentTool, setDefaultOpenAIClient, setOpenAIAPI, setTracingDisabled } from '@openai/agents';
import { z } from 'zod';
import assert from 'node:assert/strict';
import { ajv, check, finish, noThinking, question, weatherSchema, weatherZod, assertWeatherArgs, personSchema,
         assertPerson, agentRunSummary } from './shared.mjs';

const [port, model, apiKey = 'none'] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey, maxRetries: 0, timeout: 300_000 });
const weatherTool = { type: 'function', name: 'get_weather', description: 'Weather in a city',
                      parameters: weatherSchema, strict: true };
const timeTool = { type: 'function', name: 'get_time', description: 'Time in a city', strict: true,
                   parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } },
                                 required: ['city'], additionalProperties: false } };
// The documented shape of a whole response.
function assertResponse(r, { status = 'completed' } = {}) {
  assert.equal(r.object, 'response');
  assert.ok(typeof r.id === 'string' && r.id.startsWith('resp_'), `id ${r.id}`);
  assert.equal(r.model, model);
  assert.equal(typeof r.created_at, 'number');
  assert.equal(r.status, status, `status ${r.status}: ${JSON.stringify(r.incomplete_details)}`);
  if (status === 'incomplete') assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(r.error ?? null, null);
  assert.ok(Array.isArray(r.output) && r.output.length > 0, 'output items');
  for (const item of r.output) {
    assert.ok(typeof item.id === 'string' && item.id.length > 0, `item id: ${JSON.stringify(item)}`);
    if (item.type === 'message') {
      assert.equal(item.role, 'assistant');
      assert.ok(['completed', 'incomplete'].includes(item.status), `message status ${item.status}`);
      for (const part of item.content) {
        assert.equal(part.type, 'output_text', JSON.stringify(part));
        assert.equal(typeof part.text, 'string');
        assert.ok(Array.isArray(part.annotations), 'output_text has annotations');
      }
    } else if (item.type === 'function_call') {
      assert.ok(typeof item.call_id === 'string' && item.call_id.length > 0, `call_id: ${JSON.stringify(item)}`);
      assert.equal(typeof item.name, 'string');
      assert.equal(typeof item.arguments, 'string');
      assert.equal(item.status, 'completed');
    } else {
      assert.equal(item.type, 'reasoning', `an item of a documented type: ${JSON.stringify(item)}`);
    }
  }
  const u = r.usage;
  assert.ok(u.input_tokens > 0 && u.output_tokens > 0, JSON.stringify(u));
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.equal(typeof u.input_tokens_details?.cached_tokens, 'number', 'input_tokens_details');
  assert.equal(typeof u.output_tokens_details?.reasoning_tokens, 'number', 'output_tokens_details');
  return r;
}

// Output items without their ids (they differ between two answers to one request).
const content = (output) => output.map(({ id, call_id, ...rest }) => rest);

// A raw stream of typed events, each checked against the documented order, assembled into
// the response it describes; the final event's response must be what was assembled.
async function assemble(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  const types = events.map((e) => e.type);
  const where = () => types.join(' ');
  events.forEach((e, i) => assert.equal(e.sequence_number, events[0].sequence_number + i, `sequence_number of #${i}: ${where()}`));
  assert.equal(types[0], 'response.created', where());
  assert.equal(types[1], 'response.in_progress', where());
  assert.equal(events[0].response.status, 'in_progress');
  assert.deepEqual(events[0].response.output, []);
  const last = events.at(-1);
  assert.equal(last.type, `response.${last.response.status}`, `the last event names the status: ${where()}`);
  const output = [];
  const item = (e) => {
    const it = output[e.output_index];
    assert.ok(it, `event for a missing item: ${JSON.stringify(e)}`);
    assert.equal(e.item_id, it.id, `item_id of ${e.type}`);
    return it;
  };
  const part = (e) => {
    const p = item(e).content[e.content_index];
    assert.ok(p, `event for a missing part: ${JSON.stringify(e)}`);
    return p;
  };
  const done = new Set();
  for (const e of events.slice(2, -1)) {
    switch (e.type) {
      case 'response.output_item.added':
        assert.equal(e.output_index, output.length, 'items are added in order');
        assert.equal(e.item.status, 'in_progress');
        if (e.item.type === 'message') assert.deepEqual(e.item.content, []);
        if (e.item.type === 'function_call') assert.equal(e.item.arguments, '');
        output.push(structuredClone(e.item));
        break;
      case 'response.content_part.added':
        assert.equal(e.content_index, item(e).content.length, 'parts are added in order');
        assert.equal(e.part.text, '', 'a part starts empty');
        item(e).content.push(structuredClone(e.part));
        break;
      case 'response.output_text.delta':
      case 'response.reasoning_text.delta':
        assert.ok(!done.has(`${e.output_index}/${e.content_index}`), 'no delta after done');
        part(e).text += e.delta;
        break;
      case 'response.output_text.done':
      case 'response.reasoning_text.done':
        assert.equal(e.text, part(e).text, `${e.type} repeats the deltas`);
        done.add(`${e.output_index}/${e.content_index}`);
        break;
      case 'response.content_part.done':
        assert.deepEqual(e.part, part(e), 'content_part.done repeats the part');
        break;
      case 'response.function_call_arguments.delta':
        item(e).arguments += e.delta;
        break;
      case 'response.function_call_arguments.done':
        assert.equal(e.arguments, item(e).arguments, 'function_call_arguments.done repeats the deltas');
        break;
      case 'response.output_item.done': {
        const it = item({ ...e, item_id: e.item.id });
        assert.deepEqual({ ...e.item, status: undefined }, { ...it, status: undefined }, 'output_item.done repeats the item');
        output[e.output_index] = structuredClone(e.item);
        break;
      }
      default:
        assert.fail(`an event of an undocumented type or in the wrong place: ${e.type} (${where()})`);
    }
  }
  assert.deepEqual(last.response.output, output, 'the final response holds what the events built');
  return { response: last.response, types };
}

// ---- the official SDK's responses.create -----------------------------------------------------

const brief = { model, instructions: 'Be brief.', input: 'Hi', temperature: 0, max_output_tokens: 16, ...noThinking };
let text;
await check('responses: text, the same as chat completions', async () => {
  const r = assertResponse(await client.responses.create(brief), { status: 'incomplete' });
  assert.equal(r.output.length, 1);
  assert.equal(r.output[0].type, 'message');
  text = r.output[0].content[0].text;
  assert.ok(text.length > 0, 'some text');
  assert.equal(r.output_text, text, 'the SDK gathers output_text');
  assert.equal(r.usage.output_tokens, 16);
  assert.equal(r.max_output_tokens, 16);
  assert.equal(r.temperature, 0);
  assert.equal(r.instructions, 'Be brief.');
  const chat = await client.chat.completions.create({
    model, messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hi' }],
    temperature: 0, max_tokens: 16, ...noThinking });
  assert.equal(text, chat.choices[0].message.content, 'one prompt, one greedy answer');
  assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
});

await check('responses: text streamed, the events assembling to the same response', async () => {
  const { response, types } = await assemble(await client.responses.create({ ...brief, stream: true }));
  assert.deepEqual(types.filter((t) => !t.endsWith('.delta')), [
    'response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.incomplete']);
  assert.ok(types.filter((t) => t === 'response.output_text.delta').length > 1, 'the text came in pieces');
  assertResponse(response, { status: 'incomplete' });
  assert.equal(response.output[0].content[0].text, text);
  assert.equal(response.usage.output_tokens, 16);
  const helper = await client.responses.stream(brief).finalResponse();
  assert.equal(helper.output_text, text, "the SDK's stream helper assembles the same text");
});

const toolRequest = { model, input: question, tools: [weatherTool, timeTool], tool_choice: 'required',
                      parallel_tool_calls: false, temperature: 0, max_output_tokens: 64, ...noThinking };
let firstTurn;
await check('responses: a required function tool, streamed and not', async () => {
  const r = assertResponse(await client.responses.create(toolRequest));
  const calls = r.output.filter((i) => i.type === 'function_call');
  assert.equal(calls.length, 1, `one call (parallel_tool_calls false): ${JSON.stringify(r.output)}`);
  assert.equal(r.parallel_tool_calls, false);
  for (const c of calls) {
    assert.ok(['get_weather', 'get_time'].includes(c.name), c.name);
    const args = JSON.parse(c.arguments);
    if (c.name === 'get_weather') assertWeatherArgs(args);
    else assert.ok(ajv.validate(timeTool.parameters, args), c.arguments);
  }
  assert.ok(r.tools.length === 2 && r.tool_choice === 'required', 'the response echoes its tools');
  const { response, types } = await assemble(await client.responses.create({ ...toolRequest, stream: true }));
  assert.ok(types.includes('response.function_call_arguments.delta'), types.join(' '));
  assert.equal(types.at(-1), 'response.completed');
  assert.deepEqual(content(response.output), content(r.output), 'streamed and non-streamed outputs agree');
  assert.deepEqual([response.usage.input_tokens, response.usage.output_tokens], [r.usage.input_tokens, r.usage.output_tokens],
                   'the same usage (cached_tokens aside: the prefix cache now holds the prompt)');
  firstTurn = r;
});

await check('responses: a named function tool; reasoning effort none turns thinking off', async () => {
  const { chat_template_kwargs, ...thinking } = toolRequest;
  assert.ok(chat_template_kwargs);
  const r = assertResponse(await client.responses.create({
    ...thinking, tool_choice: { type: 'function', name: 'get_weather' }, reasoning: { effort: 'none' } }));
  const calls = r.output.filter((i) => i.type === 'function_call');
  assert.equal(calls.length, 1, JSON.stringify(r.output));
  assert.equal(calls[0].name, 'get_weather');
  assertWeatherArgs(JSON.parse(calls[0].arguments));
});

const formatRequest = { model, input: 'Describe a person.', temperature: 0, max_output_tokens: 64, ...noThinking,
                        text: { format: { type: 'json_schema', name: 'person', schema: personSchema, strict: true } } };
await check('responses: text.format json_schema, streamed and not', async () => {
  const r = assertResponse(await client.responses.create(formatRequest));
  assertPerson(JSON.parse(r.output_text));
  assert.deepEqual(r.text.format.schema, personSchema, 'the response echoes its format');
  const { response } = await assemble(await client.responses.create({ ...formatRequest, stream: true }));
  assert.deepEqual(content(response.output), content(r.output), 'streamed and non-streamed outputs agree');
});

await check('responses: responses.parse with a zod text format', async () => {
  const person = z.object({ name: z.string().max(10), age: z.number().int().min(0).max(120) });
  const { text: _, ...rest } = formatRequest;
  const r = await client.responses.parse({ ...rest, text: { format: zodTextFormat(person, 'person') } });
  assertResponse(r);
  assert.deepEqual(r.output_parsed, person.parse(JSON.parse(r.output_text)));
});

// Turn 2 after the forced calls of turn 1: the same conversation given two ways.
const outputs = () => firstTurn.output.filter((i) => i.type === 'function_call')
  .map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: 'sunny, 21 C' }));
const secondTurn = { model, temperature: 0, max_output_tokens: 12, tools: [weatherTool, timeTool], ...noThinking };
let byId;
await check('responses: two turns by previous_response_id', async () => {
  byId = assertResponse(await client.responses.create({ ...secondTurn, previous_response_id: firstTurn.id, input: outputs() }),
                        { status: 'incomplete' });
  assert.equal(byId.previous_response_id, firstTurn.id);
  assert.ok(byId.usage.input_tokens > firstTurn.usage.input_tokens,
            `the first turn is in the prompt: ${byId.usage.input_tokens} tokens after ${firstTurn.usage.input_tokens}`);
  await assert.rejects(client.responses.create({ ...secondTurn, previous_response_id: 'resp_nosuch', input: 'Hi' }),
                       (e) => [400, 404].includes(e.status) && e.error?.code === 'previous_response_not_found' &&
                              e.error?.param === 'previous_response_id');
});

await check('responses: two turns by passing the items back', async () => {
  const input = [{ role: 'user', content: question }, ...firstTurn.output, ...outputs()];
  const r = assertResponse(await client.responses.create({ ...secondTurn, input }), { status: 'incomplete' });
  assert.equal(r.usage.input_tokens, byId.usage.input_tokens, 'the same prompt either way');
  assert.deepEqual(content(r.output), content(byId.output), 'the same answer either way');
  const { response } = await assemble(await client.responses.create({ ...secondTurn, input, stream: true }));
  assert.deepEqual(content(response.output), content(r.output), 'streamed and non-streamed outputs agree');
});

// ---- the OpenAI Agents SDK over the Responses API -------------------------------------------

setTracingDisabled(true); // nothing leaves the machine
setDefaultOpenAIClient(client);
setOpenAIAPI('responses');

function weatherAgent(calls) {
  const getWeather = agentTool({
    name: 'get_weather', description: 'Weather in a city',
    parameters: weatherZod,
    execute: async (args) => { calls.push(args); return `sunny in ${args.city}`; },
  });
  return new Agent({
    name: 'weather', instructions: 'Answer with the weather tool.', tools: [getWeather], model,
    modelSettings: { toolChoice: 'required', temperature: 0, maxTokens: 64, reasoning: { effort: 'none' } },
    resetToolChoice: true,
  });
}

let agentRun;
await check('agents (responses): the agent calls its tool, then finishes', async () => {
  const calls = [];
  const result = await run(weatherAgent(calls), question, { maxTurns: 3 });
  agentRun = agentRunSummary(result, calls);
  assert.ok(result.rawResponses.every((r) => r.responseId?.startsWith('resp_')), 'answers of /v1/responses');
});

await check('agents (responses), streamed: the same run', async () => {
  const calls = [];
  const result = await run(weatherAgent(calls), question, { maxTurns: 3, stream: true });
  let text = '';
  for await (const ev of result) {
    if (ev.type === 'raw_model_stream_event' && ev.data.type === 'output_text_delta') text += ev.data.delta;
  }
  await result.completed;
  assert.equal(result.error ?? null, null);
  const streamed = agentRunSummary(result, calls);
  assert.deepEqual(streamed, agentRun);
  assert.ok(result.rawResponses.every((r) => r.responseId?.startsWith('resp_')), 'answers of /v1/responses');
  assert.equal(text, agentRun.finalOutput, 'the text deltas assemble to the final output');
});

await check('agents (responses): a run continued by previousResponseId', async () => {
  const calls = [];
  const agent = weatherAgent(calls);
  const first = await run(agent, question, { maxTurns: 3 });
  assert.ok(first.lastResponseId?.startsWith('resp_'), `lastResponseId ${first.lastResponseId}`);
  const next = await run(agent.clone({ modelSettings: { ...agent.modelSettings, toolChoice: 'none' } }), 'Thanks.',
                         { maxTurns: 1, previousResponseId: first.lastResponseId });
  assert.equal(typeof next.finalOutput, 'string');
  assert.equal(calls.length, 1, 'no tool call in the follow-up');
});

finish();
