// End-to-end proof that the clients people build on work with `nanovllm serve` over
// /v1/chat/completions: the OpenAI Agents SDK (an agent that calls a tool, then finishes),
// LangChain.js ChatOpenAI (bindTools with a required tool, withStructuredOutput with a JSON
// schema, streaming) and the Vercel AI SDK's OpenAI-compatible provider (generateText with a
// required tool, generateObject, streamText). Each client parses what the server sends with
// its own code, so these checks fail on any shape it does not accept.
//
// Usage: node tests/e2e/clients.mjs PORT MODEL_NAME [API_KEY]
//
// The tiny random model writes nothing sensible on its own, so the calls and objects are
// forced: tool_choice required (decoding constrained to a call whose arguments match the
// tool's schema) and response_format json_schema. Thinking is turned off through each
// client's own extra-body option (chat_template_kwargs), as the Qwen3 template thinks first.
// Temperature 0: every streamed answer must assemble to the non-streamed one.
// One line per check, "ok N" last; exit status 1 at the first failure.
import OpenAI from 'openai';
import { Agent, run, tool as agentTool, OpenAIChatCompletionsModel, setTracingDisabled } from '@openai/agents';
import { ChatOpenAI } from '@langchain/openai';
import { tool as lcTool } from '@langchain/core/tools';
import { concat } from '@langchain/core/utils/stream';
import { generateText, generateObject, streamText, streamObject, tool as aiTool, jsonSchema } from 'ai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { z } from 'zod';
import assert from 'node:assert/strict';
import { ajv, check, finish, noThinking, question, weatherSchema, weatherZod, assertWeatherArgs, personSchema,
         assertPerson, agentRunSummary } from './shared.mjs';

const [port, model, apiKey = 'none'] = process.argv.slice(2);
const baseURL = `http://127.0.0.1:${port}/v1`;
// ---- the OpenAI Agents SDK, over chat completions ----------------------------------------

setTracingDisabled(true); // nothing leaves the machine
const openai = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 300_000 });

// The run: turn 1 must call get_weather (toolChoice required), the SDK runs the tool and
// resets toolChoice to auto (resetToolChoice), turn 2 answers in text and the run ends.
function weatherAgent(calls) {
  const getWeather = agentTool({
    name: 'get_weather', description: 'Weather in a city', parameters: weatherZod,
    execute: async (args) => { calls.push(args); return `sunny in ${args.city}`; },
  });
  return new Agent({
    name: 'weather', instructions: 'Answer with the weather tool.', tools: [getWeather],
    model: new OpenAIChatCompletionsModel(openai, model),
    modelSettings: { toolChoice: 'required', temperature: 0, maxTokens: 64, providerData: noThinking },
    resetToolChoice: true,
  });
}

let agentRun;
await check('agents (chat completions): the agent calls its tool, then finishes', async () => {
  const calls = [];
  agentRun = agentRunSummary(await run(weatherAgent(calls), question, { maxTurns: 3 }), calls);
});

await check('agents (chat completions), streamed: the same run', async () => {
  const calls = [];
  const result = await run(weatherAgent(calls), question, { maxTurns: 3, stream: true });
  let text = '';
  for await (const ev of result) {
    if (ev.type === 'raw_model_stream_event' && ev.data.type === 'output_text_delta') text += ev.data.delta;
  }
  await result.completed;
  assert.equal(result.error ?? null, null);
  const streamed = agentRunSummary(result, calls);
  assert.deepEqual(streamed.args, agentRun.args);
  assert.equal(streamed.finalOutput, agentRun.finalOutput);
  assert.equal(text, agentRun.finalOutput, 'the text deltas assemble to the final output');
});

await check('agents (chat completions): maxTurns ends a run that keeps calling tools', async () => {
  const calls = [];
  const agent = weatherAgent(calls).clone({ resetToolChoice: false });
  await assert.rejects(run(agent, question, { maxTurns: 2 }), (e) => e.name === 'MaxTurnsExceededError');
  assert.equal(calls.length, 2, 'one call per turn');
  calls.forEach(assertWeatherArgs);
});

// ---- LangChain.js ChatOpenAI ---------------------------------------------------------------

// maxTokens is the model's, not a call option: one model per budget
const chatModel = (maxTokens) => new ChatOpenAI({
  model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens, maxRetries: 0, modelKwargs: noThinking,
});
const chat = chatModel(24), chatTools = chatModel(64); // room for a whole call or object
const lcWeather = lcTool(async ({ city }) => `sunny in ${city}`,
  { name: 'get_weather', description: 'Weather in a city', schema: weatherZod });

await check('langchain: bindTools with a required tool, invoked and streamed', async () => {
  const bound = chatTools.bindTools([lcWeather], { tool_choice: 'required' });
  const msg = await bound.invoke(question);
  assert.equal(msg.tool_calls.length, 1, JSON.stringify(msg.tool_calls));
  const [call] = msg.tool_calls;
  assert.equal(call.name, 'get_weather');
  assert.ok(call.id?.startsWith('call_'), call.id);
  assertWeatherArgs(call.args);
  assert.deepEqual(msg.invalid_tool_calls ?? [], []);
  assert.equal(msg.response_metadata.finish_reason, 'tool_calls');
  // the tool runs on what LangChain parsed
  assert.equal((await lcWeather.invoke(call)).content, `sunny in ${call.args.city}`);
  let whole;
  for await (const chunk of await bound.stream(question)) whole = whole ? concat(whole, chunk) : chunk;
  assert.equal(whole.tool_calls.length, 1, JSON.stringify(whole.tool_call_chunks));
  assert.equal(whole.tool_calls[0].name, 'get_weather');
  assert.equal(whole.tool_calls[0].id, whole.tool_call_chunks[0].id);
  assert.deepEqual(whole.tool_calls[0].args, call.args, 'streamed and non-streamed calls agree');
});

await check('langchain: a named tool_choice', async () => {
  const add = { type: 'function', function: { name: 'add', description: 'Adds two integers',
    parameters: { type: 'object', properties: { a: { type: 'integer', minimum: 0, maximum: 99 },
                                                b: { type: 'integer', minimum: 0, maximum: 99 } },
                  required: ['a', 'b'], additionalProperties: false } } };
  const msg = await chatTools.bindTools([lcWeather, add], { tool_choice: 'add' })
    .invoke('What is 2 + 3?');
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].name, 'add');
  assert.ok(ajv.validate(add.function.parameters, msg.tool_calls[0].args), JSON.stringify(msg.tool_calls[0].args));
});

await check('langchain: withStructuredOutput with a JSON schema, invoked and streamed', async () => {
  const structured = chatTools
    .withStructuredOutput({ title: 'person', ...personSchema }, { method: 'jsonSchema', strict: true, includeRaw: true });
  const { raw, parsed } = await structured.invoke('Describe a person.');
  assertPerson(parsed);
  assert.deepEqual(parsed, JSON.parse(raw.content), 'parsed is the answer text');
  assert.equal(raw.response_metadata.finish_reason, 'stop');
  let last;
  for await (const chunk of await structured.stream('Describe a person.')) last = chunk;
  assert.deepEqual(last.parsed, parsed, 'streamed and non-streamed objects agree');
});

await check('langchain: streaming text assembles to the invoked text', async () => {
  const msg = await chat.invoke([['system', 'Be brief.'], ['human', 'Hi']]);
  assert.equal(typeof msg.content, 'string');
  assert.ok(msg.content.length > 0, 'some text');
  assert.equal(msg.response_metadata.finish_reason, 'length');
  assert.equal(msg.usage_metadata.output_tokens, 24);
  let text = '', n = 0, whole;
  for await (const chunk of await chat.stream([['system', 'Be brief.'], ['human', 'Hi']])) {
    text += chunk.content;
    n++;
    whole = whole ? concat(whole, chunk) : chunk;
  }
  assert.ok(n > 2, `streamed in pieces (${n} chunks)`);
  assert.equal(text, msg.content);
  assert.equal(whole.usage_metadata?.output_tokens, 24, 'usage arrives with the stream');
});

// ---- the Vercel AI SDK, OpenAI-compatible provider ----------------------------------------

const provider = createOpenAICompatible({
  name: 'nanovllm', baseURL, apiKey, supportsStructuredOutputs: true, includeUsage: true,
});
const ai = { model: provider.chatModel(model), temperature: 0, maxOutputTokens: 24, maxRetries: 0,
             providerOptions: { nanovllm: noThinking } };
const aiTools = { ...ai, maxOutputTokens: 64 }; // room for a whole call

await check('ai sdk: generateText and streamText with a required tool', async () => {
  const ran = [];
  const tools = { get_weather: aiTool({ description: 'Weather in a city', inputSchema: jsonSchema(weatherSchema),
                                        execute: async (input) => { ran.push(input); return `sunny in ${input.city}`; } }) };
  const r = await generateText({ ...aiTools, prompt: question, tools, toolChoice: 'required' });
  assert.equal(r.finishReason, 'tool-calls');
  assert.equal(r.toolCalls.length, 1, JSON.stringify(r.toolCalls));
  assert.equal(r.toolCalls[0].toolName, 'get_weather');
  assertWeatherArgs(r.toolCalls[0].input);
  assert.deepEqual(ran, [r.toolCalls[0].input], 'the SDK ran the tool on the parsed input');
  assert.equal(r.toolResults[0].output, `sunny in ${r.toolCalls[0].input.city}`);
  assert.equal(r.toolResults[0].toolCallId, r.toolCalls[0].toolCallId);
  const s = streamText({ ...aiTools, prompt: question, tools, toolChoice: 'required' });
  const parts = [];
  for await (const part of s.fullStream) {
    if (part.type === 'error') throw part.error;
    parts.push(part.type);
  }
  assert.ok(parts.includes('tool-input-delta'), `the arguments streamed: ${parts.join()}`);
  const calls = await s.toolCalls;
  assert.equal(calls.length, 1);
  assert.equal(calls[0].toolName, 'get_weather');
  assert.deepEqual(calls[0].input, r.toolCalls[0].input, 'streamed and non-streamed calls agree');
  assert.equal(await s.finishReason, 'tool-calls');
});

await check('ai sdk: a zod tool with a named toolChoice', async () => {
  const tools = {
    get_weather: aiTool({ description: 'Weather in a city', inputSchema: weatherZod }),
    get_time: aiTool({ description: 'Time in a city', inputSchema: z.object({ city: z.string().max(12) }) }),
  };
  const r = await generateText({ ...aiTools, prompt: question, tools, toolChoice: { type: 'tool', toolName: 'get_weather' } });
  assert.equal(r.toolCalls.length, 1);
  assert.equal(r.toolCalls[0].toolName, 'get_weather');
  assertWeatherArgs(r.toolCalls[0].input);
});

await check('ai sdk: generateObject and streamObject', async () => {
  const req = { ...ai, maxOutputTokens: 64, schema: jsonSchema(personSchema), schemaName: 'person',
                prompt: 'Describe a person.' };
  const r = await generateObject(req);
  assertPerson(r.object);
  assert.equal(r.finishReason, 'stop');
  const s = streamObject(req);
  let partials = 0;
  for await (const _ of s.partialObjectStream) partials++;
  assert.ok(partials > 1, `partial objects while streaming (${partials})`);
  assert.deepEqual(await s.object, r.object, 'streamed and non-streamed objects agree');
});

await check('ai sdk: streamText assembles to generateText', async () => {
  const req = { ...ai, system: 'Be brief.', prompt: 'Hi' };
  const r = await generateText(req);
  assert.ok(r.text.length > 0, 'some text');
  assert.equal(r.finishReason, 'length');
  assert.equal(r.usage.outputTokens, 24);
  const s = streamText(req);
  let text = '', n = 0;
  for await (const delta of s.textStream) { text += delta; n++; }
  assert.ok(n > 2, `streamed in pieces (${n} deltas)`);
  assert.equal(text, r.text);
  assert.equal(await s.finishReason, 'length');
  assert.equal((await s.usage).outputTokens, 24, 'usage arrives with the stream');
});

finish();
