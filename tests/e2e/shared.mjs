// What the end-to-end client scripts share: the check runner (one line per check, "ok N"
// last, exit status 1 at the first failure), the weather tool and the person object the
// forced calls and structured outputs use, and what a finished Agents SDK run must show.
import Ajv2020 from 'ajv/dist/2020.js';
import assert from 'node:assert/strict';
import { z } from 'zod';

let checks = 0;
export async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    const cause = e.cause ? `\ncause: ${e.cause.stack ?? e.cause}` : '';
    const body = e.error ? `\nbody: ${JSON.stringify(e.error)}` : '';
    console.log(`FAIL ${name}: ${e.stack ?? e}${cause}${body}`);
    process.exit(1);
  }
  checks++;
  console.log(`pass ${name} [${((Date.now() - t0) / 1000).toFixed(1)} s]`);
}
export function finish() { console.log(`ok ${checks}`); }

export const ajv = new Ajv2020({ strict: false });
export const noThinking = { chat_template_kwargs: { enable_thinking: false } };
export const question = 'What is the weather in Paris?';

// The tool every client declares, as JSON Schema (what the server constrains to) and as zod.
export const weatherSchema = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, unit: { type: 'string', enum: ['c', 'f'] } },
  required: ['city', 'unit'], additionalProperties: false,
};
export const weatherZod = z.object({ city: z.string().max(12), unit: z.enum(['c', 'f']) });
const validWeather = ajv.compile(weatherSchema);
export function assertWeatherArgs(args) {
  assert.ok(validWeather(args), `arguments ${JSON.stringify(args)}: ${ajv.errorsText(validWeather.errors)}`);
}

// The object the structured-output checks ask for.
export const personSchema = {
  type: 'object',
  properties: { name: { type: 'string', maxLength: 10 }, age: { type: 'integer', minimum: 0, maximum: 120 },
                pets: { type: 'array', items: { type: 'string', enum: ['cat', 'dog'] }, maxItems: 2 } },
  required: ['name', 'age', 'pets'], additionalProperties: false,
};
const validPerson = ajv.compile(personSchema);
export function assertPerson(obj) {
  assert.ok(validPerson(obj), `object ${JSON.stringify(obj)}: ${ajv.errorsText(validPerson.errors)}`);
}

// A finished run of the 'weather' agent (its tool pushes its arguments to calls and answers
// `sunny in CITY`): the tool ran once with valid arguments, its output went back, and a
// second model turn answered in text. Returns what two runs must agree on.
export function agentRunSummary(result, calls) {
  assert.equal(calls.length, 1, `the tool ran once: ${JSON.stringify(calls)}`);
  assertWeatherArgs(calls[0]);
  const types = result.newItems.map((i) => i.type);
  assert.deepEqual(types, ['tool_call_item', 'tool_call_output_item', 'message_output_item'], types.join());
  const call = result.newItems[0].rawItem;
  assert.equal(call.name, 'get_weather');
  assert.ok(call.callId, `a call id: ${JSON.stringify(call)}`);
  assert.deepEqual(JSON.parse(call.arguments), calls[0], 'the tool got the arguments the model sent');
  assert.equal(result.newItems[1].output, `sunny in ${calls[0].city}`);
  assert.equal(result.newItems[1].rawItem.callId, call.callId);
  assert.equal(result.rawResponses.length, 2, 'two model turns');
  assert.equal(typeof result.finalOutput, 'string', `the run ended with a final output: ${result.finalOutput}`);
  assert.equal(result.lastAgent.name, 'weather');
  return { args: calls[0], finalOutput: result.finalOutput };
}
