// End-to-end proof of structured outputs (constrained decoding) in `nanovllm serve`,
// through the official OpenAI SDK, against a random-weight model: whatever the model
// "wants", every finished answer must satisfy its constraint.
//
// Usage: node tests/e2e/structured.mjs PORT MODEL_NAME [API_KEY]
//        (STRUCTURED_ONLY=REGEX: only the constraints whose "kind name" matches, no one-off checks)
//
// For each of 30+ JSON Schemas, 6+ regexes, 4+ choice lists and 3 GBNF grammars: answers
// sampled at temperature 1.0 with fixed seeds and n > 1 from /v1/completions (guided_json,
// structured_outputs.json, response_format, or the schema as a string; guided_* or
// structured_outputs for the others) and /v1/chat/completions (response_format
// json_schema, strict). Every answer that finished with "stop" is checked: JSON.parse +
// ajv (draft 2020-12, ajv-formats), a compact text with the schema's properties in its
// order; regexes as full matches; choices as members; grammars by hand-written
// recognizers. Per constraint, at least MIN_VALID checked answers, at least two distinct
// ones, and what "covers" asks for (a nested tree, an extra property, ...); answers of
// bounded constraints must all finish. Then json_object, streaming == non-streaming,
// same seed == same answers, and the 400s. One summary line per constraint, "ok N" last;
// exit status 1 with every failure listed, each with its request (to replay with curl)
// and the answer.
import OpenAI from 'openai';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [port, model, apiKey] = process.argv.slice(2);
if (!port || !model) {
  console.error('usage: node structured.mjs PORT MODEL_NAME [API_KEY]');
  process.exit(2);
}
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: apiKey ?? 'none', maxRetries: 0,
                            timeout: 300_000 });
const MIN_VALID = 20;
const CONCURRENCY = 8;      // constraints sampled at once (the engine batches them)
const MAX_ROUNDS = 8;       // requests per constraint at most
const TOKEN_BUDGET = 30000; // tokens generated per constraint at most (then more rounds stop)
const started = Date.now();

const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv);

const failures = [];
function fail(what, detail) {
  failures.push(`${what}: ${detail}`);
  console.log(`FAIL ${what}: ${detail.length > 600 ? detail.slice(0, 600) + '...' : detail}`);
}
const show = (s) => JSON.stringify(s);

// ---- checks of one answer ------------------------------------------------------------

// No whitespace outside strings: the server writes JSON compactly.
function isCompact(text) {
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === ' ' || c === '\n' || c === '\r' || c === '\t') return false;
  }
  return true;
}

// Whether text is, or can still be completed into, one compact JSON value (an answer cut
// off by max_tokens): a pushdown recognizer of JSON with no whitespace between tokens and
// no name twice in an object (which JSON.parse would hide). top: the characters the
// value may start with.
function isJsonPrefix(text, top = '{["-0123456789tfn') {
  const stack = []; // 'a', or the Set of the names seen in an object
  let state = 'value', lit = '', hex = 0, key = false, name = '';
  if (text.length && !top.includes(text[0])) return false;
  const afterValue = () => { state = stack.length ? 'after' : 'done'; };
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    switch (state) {
    case 'string':
      if (c === '"') {
        if (!key) afterValue();
        else if (stack[stack.length - 1].has(name)) return false;
        else { stack[stack.length - 1].add(name); state = 'colon'; }
      } else if (c === '\\') state = 'escape';
      else if (c < ' ') return false;
      name += c;
      continue;
    case 'escape':
      if (c === 'u') { state = 'hex'; hex = 0; } else if ('"\\/bfnrt'.includes(c)) state = 'string'; else return false;
      continue;
    case 'hex':
      if (!/[0-9a-fA-F]/.test(c)) return false;
      if (++hex === 4) state = 'string';
      continue;
    case 'literal':
      if (c !== lit[0]) return false;
      lit = lit.slice(1);
      if (!lit) afterValue();
      continue;
    case 'minus': if (c === '0') state = 'zero'; else if (c >= '1' && c <= '9') state = 'int'; else return false; continue;
    case 'dot': case 'e': case 'esign':
      if (c >= '0' && c <= '9') { state = state === 'dot' ? 'frac' : 'exp'; continue; }
      if (state === 'e' && (c === '+' || c === '-')) { state = 'esign'; continue; }
      return false;
    case 'zero': case 'int': case 'frac': case 'exp':
      if (c >= '0' && c <= '9' && state !== 'zero') continue;
      if (c === '.' && (state === 'zero' || state === 'int')) { state = 'dot'; continue; }
      if ((c === 'e' || c === 'E') && state !== 'exp') { state = 'e'; continue; }
      afterValue(); // the number ended: this character follows it
      break;
    }
    switch (state) {
    case 'value': case 'first-item':
      if (state === 'first-item' && c === ']') { stack.pop(); afterValue(); }
      else if (c === '{') { stack.push(new Set()); state = 'first-key'; }
      else if (c === '[') { stack.push('a'); state = 'first-item'; }
      else if (c === '"') { state = 'string'; key = false; }
      else if (c === '-') state = 'minus';
      else if (c === '0') state = 'zero';
      else if (c >= '1' && c <= '9') state = 'int';
      else if ('tfn'.includes(c)) { lit = { t: 'rue', f: 'alse', n: 'ull' }[c]; state = 'literal'; }
      else return false;
      break;
    case 'first-key': case 'key':
      if (state === 'first-key' && c === '}') { stack.pop(); afterValue(); }
      else if (c === '"') { state = 'string'; key = true; name = ''; }
      else return false;
      break;
    case 'colon': if (c !== ':') return false; state = 'value'; break;
    case 'after': {
      const inObject = stack[stack.length - 1] !== 'a';
      if (c === ',') state = inObject ? 'key' : 'value';
      else if (c === (inObject ? '}' : ']')) { stack.pop(); afterValue(); }
      else return false;
      break;
    }
    default: return false; // 'done': nothing may follow the value
    }
  }
  return true;
}

function resolveRef(root, schema) {
  for (let hops = 0; schema && typeof schema === 'object' && schema.$ref && hops < 32; hops++) {
    const parts = schema.$ref.replace(/^#\//, '').split('/').map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
    let s = root;
    for (const p of parts) s = s?.[p];
    if (Object.keys(schema).length > 1) return schema; // $ref with siblings: not followed here
    schema = s;
  }
  return schema;
}

// The properties a schema names come out in the schema's order (JSON.parse keeps the
// text's order for non-integer-like keys; the suite's names are never integer-like).
function checkOrder(root, schema, value, path = '') {
  schema = resolveRef(root, schema);
  if (!schema || typeof schema !== 'object' || value === null || typeof value !== 'object') return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const item = schema.prefixItems && i < schema.prefixItems.length ? schema.prefixItems[i] : schema.items;
      const why = checkOrder(root, item, value[i], `${path}/${i}`);
      if (why) return why;
    }
    return null;
  }
  if (!schema.properties) return null;
  const names = Object.keys(schema.properties);
  const seen = Object.keys(value).filter((k) => names.includes(k));
  const expected = names.filter((k) => seen.includes(k));
  if (seen.join('\u0000') !== expected.join('\u0000'))
    return `properties at ${path || '/'} in the order ${show(seen)}, not the schema's ${show(expected)}`;
  for (const k of seen) {
    const why = checkOrder(root, schema.properties[k], value[k], `${path}/${k}`);
    if (why) return why;
  }
  return null;
}

function schemaChecker(schema) {
  const validate = ajv.compile(schema);
  return (text) => {
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      return `not JSON (${e.message})`;
    }
    if (!validate(value)) return `invalid: ${ajv.errorsText(validate.errors)}`;
    if (!isCompact(text)) return 'whitespace between JSON tokens';
    if (!isJsonPrefix(text)) return 'a name twice in an object';
    return checkOrder(schema, schema, value);
  };
}

function regexChecker(re) {
  const full = new RegExp(`^(?:${re})$`, 'u');
  return (text) => (full.test(text) ? null : `does not fully match /${re}/u`);
}

function choiceChecker(list) {
  return (text) => (list.includes(text) ? null : 'not one of the choices');
}

// ---- GBNF grammars and their recognizers ---------------------------------------------------

// A tiny recursive-descent helper: match(re) consumes a sticky regex at the cursor.
function parser(text) {
  let pos = 0;
  return {
    get pos() { return pos; },
    set pos(p) { pos = p; },
    done: () => pos === text.length,
    peek: () => text[pos],
    eat(s) {
      if (text.startsWith(s, pos)) { pos += s.length; return true; }
      return false;
    },
    match(re) {
      re.lastIndex = pos;
      const m = re.exec(text);
      if (!m) return false;
      pos += m[0].length;
      return true;
    },
  };
}

const ARITHMETIC_GBNF = String.raw`# integer arithmetic, recursive through parentheses
root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")"
number ::= "-"? [0-9]{1,4}
`;
function recognizeArithmetic(text) {
  const p = parser(text);
  const number = /-?[0-9]{1,4}/y;
  function factor() {
    if (p.eat('(')) return expr() && p.eat(')');
    return p.match(number);
  }
  function term() {
    if (!factor()) return false;
    while (p.peek() === '*' || p.peek() === '/') {
      p.pos++;
      if (!factor()) return false;
    }
    return true;
  }
  function expr() {
    if (!term()) return false;
    while (p.peek() === '+' || p.peek() === '-') {
      p.pos++;
      if (!term()) return false;
    }
    return true;
  }
  return expr() && p.done() ? null : `not an arithmetic expression (stuck at ${p.pos})`;
}

const SETTINGS_GBNF = String.raw`root  ::= pair ("," pair){0,3}
pair  ::= key "=" value
key   ::= [a-z_] [a-z0-9_]{0,7}   # short identifiers
value ::= int
        | bool
        | str
int   ::= "-"? [1-9] [0-9]{0,5} | "0"
bool  ::= "true" | "false"
str   ::= "\"" [^"\\\n]{0,12} "\""
`;
function recognizeSettings(text) {
  const pair = String.raw`[a-z_][a-z0-9_]{0,7}=(?:-?[1-9][0-9]{0,5}|0|true|false|"[^"\\\n]{0,12}")`;
  return new RegExp(`^${pair}(?:,${pair}){0,3}$`, 'u').test(text) ? null : 'not a settings list';
}

const SEXP_GBNF = String.raw`root ::= list
list ::= "(" item (" " item){0,3} ")"
item ::= atom | list
atom ::= [a-z] | [0-9]{1,3} | "\u00e9t\u00e9"
`;
function recognizeSexp(text) {
  const p = parser(text);
  const atom = /[a-z]|[0-9]{1,3}|été/uy;
  function item() { return p.peek() === '(' ? list() : p.match(atom); }
  function list() {
    if (!p.eat('(') || !item()) return false;
    for (let i = 0; i < 3 && p.eat(' '); i++) if (!item()) return false;
    return p.eat(')');
  }
  return list() && p.done() ? null : `not an s-expression (stuck at ${p.pos})`;
}

// ---- the JSON Schemas ------------------------------------------------------------------------
// "bounded": every answer has a bounded length, so all of them must finish with "stop".
// Numbers are not bounded even between bounds (a fraction may have any number of digits),
// nor are strings without maxLength, recursion, or a format such as email.

const closed = (properties, required = Object.keys(properties), extra = {}) =>
  ({ type: 'object', properties, required, additionalProperties: false, ...extra });

// "covers": what some finished answers must show, so that a constraint is proven on more
// than its simplest corner (a one-node tree, an object without the optional parts).
const depth = (v) => (v && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v).map(depth)) : 0);
const someValue = (what, pred) => (texts) => (texts.map((t) => JSON.parse(t)).some(pred) ? null : `no ${what}`);
const allOf = (...covers) => (texts) => covers.map((f) => f(texts)).find((why) => why) ?? null;

const SCHEMAS = [
  { name: 'person', bounded: true, schema: closed({
    name: { type: 'string', minLength: 1, maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    member: { type: 'boolean' },
  }) },
  { name: 'nested objects', maxTokens: 150, schema: closed({
    user: closed({ id: { type: 'integer', minimum: 1, maximum: 99999 }, handle: { type: 'string', maxLength: 8 } }),
    address: closed({
      city: { enum: ['Paris', 'Tokyo', 'Lima'] },
      geo: closed({ lat: { type: 'number', minimum: -90, maximum: 90 }, lon: { type: 'number', minimum: -180, maximum: 180 } }),
    }),
  }) },
  { name: 'deep nesting', bounded: true, schema: closed({
    a: closed({ b: closed({ c: closed({ d: closed({ leaf: { type: 'integer', minimum: -3, maximum: 3 } }) }) }) }),
  }) },
  { name: 'tree ($defs, recursive)', maxTokens: 150, schema: {
    $defs: {
      node: closed({
        value: { type: 'integer', minimum: -9, maximum: 9 },
        children: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 },
      }, ['value']),
    },
    $ref: '#/$defs/node',
  }, covers: someValue('tree three levels deep', (v) => depth(v) >= 5) },
  { name: 'tree with required children', maxTokens: 150, schema: {
    $defs: {
      node: closed({ leaf: { type: 'boolean' }, kids: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }),
    },
    type: 'object', properties: { root: { $ref: '#/$defs/node' } }, required: ['root'], additionalProperties: false,
  }, covers: someValue('node with kids', (v) => v.root.kids.length > 0) },
  { name: 'linked list ($ref, null end)', maxTokens: 150, schema: {
    $defs: {
      cell: closed({
        head: { type: 'string', enum: ['a', 'b', 'c'] },
        tail: { anyOf: [{ $ref: '#/$defs/cell' }, { type: 'null' }] },
      }),
    },
    type: 'object', properties: { list: { $ref: '#/$defs/cell' } }, required: ['list'], additionalProperties: false,
  }, covers: someValue('list of three cells', (v) => v.list.tail?.tail) },
  { name: 'definitions (draft 7 $ref)', bounded: true, schema: {
    definitions: { point: closed({ x: { type: 'integer', minimum: -5, maximum: 5 }, y: { type: 'integer', minimum: -5, maximum: 5 } }) },
    ...closed({ from: { $ref: '#/definitions/point' }, to: { $ref: '#/definitions/point' } }),
  } },
  { name: 'enum of unicode strings', bounded: true, schema: {
    enum: ['café', 'naïve', '日本語', 'emoji 🎉', 'Ωmega', 'Zürich'],
  } },
  { name: 'enum of mixed values', bounded: true, schema: {
    enum: [1, 'two', 3.5, null, true, { k: [1, 2] }, ['x', { y: null }], -7],
  } },
  { name: 'enum with escapes', bounded: true, schema: {
    type: 'string', enum: ['say "hi"', 'back\\slash', 'new\nline', 'tab\there', 'slash/'],
  } },
  { name: 'const', bounded: true, schema: closed({
    version: { const: '1.0' },
    answer: { const: 42 },
    flags: { const: [true, false, null] },
    free: { type: 'integer', minimum: 0, maximum: 9 },
  }) },
  { name: 'pattern (anchored)', bounded: true, schema: closed({
    code: { type: 'string', pattern: '^[A-Z]{3}-\\d{4}$' },
    hex: { type: 'string', pattern: '^#[0-9a-f]{6}$' },
  }) },
  { name: 'pattern (unanchored search)', maxTokens: 120, prompts: { completions: ['ok', '1', 'x'], chat: ['Done.', 'a@b.com', 'Yes'] },
    schema: { type: 'string', pattern: '[,.;:!?@]' }, // punctuation somewhere
    covers: someValue('text around the match', (v) => v.length > 1) },
  { name: 'pattern (unicode, alternation)', bounded: true, schema: {
    type: 'string', pattern: '^(?:[α-ω]{1,3}|日本|\\u00e9t\\u00e9)(?:-[0-9])?$',
  } },
  { name: 'formats date/time/date-time', bounded: true, schema: closed({
    day: { type: 'string', format: 'date' },
    at: { type: 'string', format: 'time' },
    stamp: { type: 'string', format: 'date-time' },
  }) },
  { name: 'format uuid', bounded: true, schema: closed({
    id: { type: 'string', format: 'uuid' },
    more: { type: 'array', maxItems: 2, items: { type: 'string', format: 'uuid' } },
  }) },
  // A random model almost never writes the "@" and then closes the string: answers are
  // checked as viable prefixes of an email (see EMAIL_PREFIX), and finished ones in full.
  { name: 'format email', prefixOnly: true, maxTokens: 40, schema: { type: 'string', format: 'email' } },
  { name: 'integer negative range', bounded: true, schema: { type: 'integer', minimum: -50, maximum: -10 } },
  { name: 'integer exclusive bounds', bounded: true, schema: closed({
    x: { type: 'integer', exclusiveMinimum: -5, exclusiveMaximum: 5 },
    y: { type: 'integer', exclusiveMinimum: 99, maximum: 1000 },
    z: { type: 'integer', minimum: -1000000, exclusiveMaximum: -999990 },
  }) },
  { name: 'integer unbounded above', maxTokens: 300, schema: { type: 'integer', minimum: 10 } },
  { name: 'number bounds', maxTokens: 100, schema: closed({
    ratio: { type: 'number', minimum: 0, maximum: 1 },
    temp: { type: 'number', minimum: -1.5, maximum: 2.25 },
    open: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 0.5 },
  }) },
  { name: 'array minItems/maxItems', bounded: true, schema: {
    type: 'array', items: { type: 'integer', minimum: 0, maximum: 99 }, minItems: 2, maxItems: 5,
  } },
  { name: 'nested arrays', bounded: true, schema: {
    type: 'array', minItems: 1, maxItems: 3,
    items: { type: 'array', maxItems: 3, items: { enum: ['x', 'o'] } },
  } },
  { name: 'prefixItems tuple', bounded: true, schema: {
    type: 'array',
    prefixItems: [{ type: 'string', maxLength: 6 }, { type: 'integer', minimum: 0, maximum: 10 }, { type: 'boolean' }],
    items: false,
  } },
  { name: 'prefixItems with rest', maxTokens: 100, schema: {
    type: 'array',
    prefixItems: [{ const: 'head' }],
    items: { type: 'number', minimum: -1, maximum: 1 },
    minItems: 2, maxItems: 4,
  } },
  { name: 'array of objects', bounded: true, schema: closed({
    order: { type: 'string', pattern: '^ORD[0-9]{5}$' },
    lines: {
      type: 'array', minItems: 1, maxItems: 3,
      items: closed({ sku: { type: 'string', pattern: '^[A-Z]{2}[0-9]{3}$' }, qty: { type: 'integer', minimum: 1, maximum: 99 } }),
    },
  }) },
  { name: 'anyOf', bounded: true, schema: {
    anyOf: [
      { type: 'string', maxLength: 5 },
      { type: 'integer', minimum: -100, maximum: 100 },
      closed({ ok: { type: 'boolean' } }),
    ],
  }, covers: (texts) => (new Set(texts.map((t) => typeof JSON.parse(t))).size > 1 ? null : 'only one branch taken') },
  { name: 'oneOf (tagged)', maxTokens: 100, schema: {
    oneOf: [
      closed({ kind: { const: 'circle' }, r: { type: 'number', minimum: 0, maximum: 10 } }),
      closed({ kind: { const: 'rect' }, w: { type: 'integer', minimum: 1, maximum: 9 }, h: { type: 'integer', minimum: 1, maximum: 9 } }),
      closed({ kind: { const: 'dot' } }),
    ],
  }, covers: (texts) => (new Set(texts.map((t) => JSON.parse(t).kind)).size > 1 ? null : 'only one branch taken') },
  { name: 'allOf of objects', bounded: true, schema: {
    allOf: [
      { type: 'object', properties: { id: { type: 'integer', minimum: 0, maximum: 999 }, tag: {} }, required: ['id'],
        additionalProperties: false },
      { type: 'object', properties: { id: {}, tag: { type: 'string', maxLength: 4 } }, required: ['tag'],
        additionalProperties: false },
    ],
  } },
  { name: 'additionalProperties schema', maxTokens: 100, prompts: { completions: ['Yes', '42', '{"'], chat: ['1', 'Yes', 'name'] },
    schema: { // extra names are unbounded strings
    type: 'object', properties: { id: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['id'],
    additionalProperties: { type: 'integer', minimum: 0, maximum: 9 }, maxProperties: 2,
  }, covers: someValue('additional property', (v) => Object.keys(v).length > 1) },
  { name: 'optional properties', bounded: true, schema: closed({
    a: { type: 'integer', minimum: 0, maximum: 5 },
    b: { type: 'boolean' },
    c: { type: 'string', maxLength: 3 },
    d: { type: 'null' },
  }, ['b']), covers: allOf(someValue('optional property present', (v) => Object.keys(v).length > 1),
                           someValue('optional property left out', (v) => Object.keys(v).length < 4)) },
  { name: 'type lists with null', bounded: true, schema: closed({
    s: { type: ['string', 'null'], maxLength: 4 },
    i: { type: ['integer', 'null'], minimum: 0, maximum: 50 },
    b: { type: ['boolean', 'null'] },
  }), covers: allOf(someValue('null', (v) => Object.values(v).includes(null)),
                    someValue('string', (v) => typeof v.s === 'string')) },
  { name: 'bounded strings', bounded: true, schema: closed({
    short: { type: 'string', minLength: 2, maxLength: 4 },
    exact: { type: 'string', minLength: 3, maxLength: 3 },
    empty: { type: 'string', maxLength: 0 },
  }) },
  { name: 'unbounded string', maxTokens: 120, schema: { type: 'string' },
    covers: someValue('string of 20 characters', (v) => [...v].length >= 20) },
  { name: 'unicode property names', bounded: true, schema: closed({
    'naïve key': { type: 'boolean' },
    '名前': { enum: ['太郎', '花子'] },
    'with "quotes"': { type: 'integer', minimum: 0, maximum: 3 },
  }) },
  { name: 'empty object only', bounded: true, single: true, schema: { type: 'object', additionalProperties: false } },
  { name: 'booleans and nulls', bounded: true, schema: {
    type: 'array', minItems: 3, maxItems: 3, items: { type: ['boolean', 'null'] },
  } },
  { name: 'number or string', maxTokens: 100, schema: {
    type: ['number', 'string'], minimum: 5, maximum: 6, maxLength: 2,
  } },
];

const REGEXES = [
  { name: 'phone', re: '\\d{3}-\\d{4}' },
  { name: 'pets', re: '(cat|dog|bird)s? (say|says) [a-z]{1,8}' },
  { name: 'names', re: '[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8}){0,2}' },
  { name: 'hex literal', re: '0x[0-9a-fA-F]{1,8}' },
  { name: 'ipv4', re: '((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)' },
  { name: 'unicode', re: '[α-ω]{2,4}(😀|日本|\\u00e9)?' },
  { name: 'date with named group', re: '(?<year>(19|20)\\d\\d)-(?:0[1-9]|1[0-2])-\\d\\d' },
  { name: 'email-ish', re: '\\w{1,10}@\\w{1,10}\\.(com|org|net)' },
  { name: 'signed decimal (unbounded)', re: '-?\\d+(\\.\\d+)?', maxTokens: 120 },
];

const CHOICES = [
  { name: 'yes/no', list: ['yes', 'no'] },
  { name: 'colors with shared prefixes', list: ['red', 'green', 'blue', 'dark red', 'dark blue'] },
  { name: 'unicode', list: ['日本語', '中文', '한국어', 'Ελληνικά', 'emoji 🎉'] },
  { name: 'escapes', list: ['a "quoted" word', 'back\\slash', 'new\nline', 'tab\there'] },
  { name: 'prefixes of each other', list: ['A', 'AB', 'ABC', 'ABCD'] },
];

const GRAMMARS = [
  { name: 'arithmetic', gbnf: ARITHMETIC_GBNF, recognize: recognizeArithmetic, maxTokens: 120 },
  { name: 'settings list', gbnf: SETTINGS_GBNF, recognize: recognizeSettings, bounded: true },
  { name: 's-expressions', gbnf: SEXP_GBNF, recognize: recognizeSexp, maxTokens: 200,
    covers: (texts) => (texts.some((t) => /\(.*\(/.test(t)) ? null : 'no nested list') },
];

// ---- requests ----------------------------------------------------------------------------------

// The first rounds use PROMPT / MESSAGES; later rounds (constraints whose answers can run
// long) vary the prompt: a random model's appetite for closing a string depends on it.
const PROMPT = 'Answer:';
const MESSAGES = [{ role: 'user', content: 'Answer in the requested format.' }];
const MORE_PROMPTS = { completions: ['ok', 'x', 'Yes', '\n', '1', '42', '"'], chat: ['Done.', 'Yes', 'Email:', '1', 'ok', 'JSON'] };
const NO_THINKING = { chat_template_kwargs: { enable_thinking: false } };

// The body fields that carry constraint c, varied over the spellings the server accepts.
function constraintFields(c, variant) {
  switch (c.kind) {
  case 'json':
    return [
      { guided_json: c.schema },
      { structured_outputs: { json: c.schema } },
      { response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: c.schema, strict: true } } },
      { guided_json: JSON.stringify(c.schema) }, // vLLM also takes the schema as a string
    ][variant % 4];
  case 'regex': return variant % 2 ? { structured_outputs: { regex: c.re } } : { guided_regex: c.re };
  case 'choice': return variant % 2 ? { structured_outputs: { choice: c.list } } : { guided_choice: c.list };
  case 'grammar': return variant % 2 ? { structured_outputs: { grammar: c.gbnf } } : { guided_grammar: c.gbnf };
  }
  throw new Error(c.kind);
}

// Chat asks for JSON the OpenAI way: response_format json_schema, strict.
function chatFields(c, variant) {
  if (c.kind === 'json')
    return { response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: c.schema, strict: true } } };
  return constraintFields(c, variant);
}

function completionRequest(c, variant, { n, seed, maxTokens, prompt = PROMPT }) {
  return { model, prompt, n, seed, temperature: 1.0, max_tokens: maxTokens, ...constraintFields(c, variant) };
}

function chatRequest(c, variant, { n, seed, maxTokens, prompt }) {
  const messages = prompt === undefined ? MESSAGES : [{ role: 'user', content: prompt }];
  return { model, messages, n, seed, temperature: 1.0, max_tokens: maxTokens, ...NO_THINKING, ...chatFields(c, variant) };
}

function request(api, c, variant, opts) {
  return api === 'chat' ? chatRequest(c, variant, opts) : completionRequest(c, variant, opts);
}

// [{text, finish}] of a response of either endpoint, by choice index.
function answers(api, response) {
  return response.choices
    .slice()
    .sort((a, b) => a.index - b.index)
    .map((ch) => ({ text: api === 'chat' ? ch.message.content : ch.text, finish: ch.finish_reason }));
}

async function send(api, body) {
  return api === 'chat' ? client.chat.completions.create(body) : client.completions.create(body);
}

// The request, to reproduce it with curl: POST /v1/{completions,chat/completions} BODY.
function describe(api, body) {
  return `POST /v1/${api === 'chat' ? 'chat/completions' : 'completions'} ${show(body)}`;
}

// A viable prefix of a JSON string holding an email (as ajv-formats' patterns and the
// server's grammar read it): a dot-atom, then "@" and host labels, not yet closed.
const ATOM = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
const LABEL = '[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
const EMAIL_PREFIX = new RegExp(
  `^"(?:(?:${ATOM}+(?:\\.${ATOM}+)*\\.?)?|${ATOM}+(?:\\.${ATOM}+)*@(?:${LABEL}\\.)*(?:[A-Za-z0-9][A-Za-z0-9-]{0,62})?)$`);

// Samples constraint c until MIN_VALID answers finished and were checked, and they cover
// it: first from both endpoints, then more rounds of larger batches with other prompts
// (a random model's preferences follow the prompt: whether it closes a string, which
// branch it takes), within MAX_ROUNDS requests and TOKEN_BUDGET generated tokens.
// A finished answer costs about the same whatever max_tokens is; larger batches are
// cheaper per token.
async function runConstraint(c, index) {
  const t0 = Date.now();
  const stats = { valid: 0, prefixes: 0, stop: 0, length: 0, invalid: 0, requests: 0, tokens: 0 };
  const validTexts = [];
  const what = `${c.kind} '${c.name}'`;
  const base = 1000 + index * 100;
  const maxTokens = c.maxTokens ?? 300;
  const prompts = c.prompts ?? MORE_PROMPTS;
  // Why more answers are needed, or null.
  const missing = () => {
    if (c.prefixOnly) return null;
    if (stats.valid < MIN_VALID) return `only ${stats.valid} answers finished (${stats.length} hit max_tokens=${maxTokens})`;
    if (new Set(validTexts).size < 2 && !c.single) return 'only one distinct answer';
    return c.covers ? c.covers(validTexts) : null;
  };
  for (let r = 0; !stats.invalid && (r < 2 || (missing() && r < MAX_ROUNDS && stats.tokens < TOKEN_BUDGET)); r++) {
    const api = r % 2 ? 'chat' : 'completions';
    const round = r < 2 ? { n: r ? 8 : 20 } : { n: 40, prompt: prompts[api][((r >> 1) - 1) % prompts[api].length] };
    const body = request(api, c, index + r, { n: round.n, seed: base + r, maxTokens, prompt: round.prompt });
    let response;
    try {
      response = await send(api, body);
    } catch (e) {
      fail(what, `request failed: ${e.status ?? ''} ${e.message} (${describe(api, body)})`);
      return stats;
    }
    stats.requests++;
    stats.tokens += response.usage?.completion_tokens ?? 0;
    answers(api, response).forEach((a, i) => {
      const where = `choice ${i} of ${describe(api, body)}`;
      if (a.finish === 'length') {
        stats.length++;
        if (c.bounded) fail(what, `a bounded answer hit max_tokens=${maxTokens}: ${show(a.text)} (${where})`);
        if (c.kind === 'json' && !isJsonPrefix(a.text)) fail(what, `cut off, but not a prefix of compact JSON: ${show(a.text)} (${where})`);
        if (c.prefixOnly) {
          if (EMAIL_PREFIX.test(a.text) || !c.check(a.text)) stats.prefixes++; // (or complete at the last token)
          else fail(what, `not a prefix of an email string: ${show(a.text)} (${where})`);
        }
        return;
      }
      if (a.finish !== 'stop') return fail(what, `finish_reason ${a.finish} (${where})`);
      stats.stop++;
      const why = c.check(a.text);
      if (!why) return void (stats.valid++, validTexts.push(a.text));
      stats.invalid++;
      fail(what, `${why}: ${show(a.text)} (${where})`);
    });
  }
  const why = !stats.invalid && missing();
  if (why) fail(what, `${why} in ${stats.requests} requests: ${show(validTexts.slice(0, 5))}...`);
  const secs = ((Date.now() - t0) / 1000).toFixed(1);
  const pad = (x, w = 3) => String(x).padStart(w);
  console.log(`${stats.invalid || why ? 'FAIL' : 'pass'} ${c.kind.padEnd(7)} ${c.name.padEnd(34)} ` +
              `validated ${pad(stats.valid)}  stop ${pad(stats.stop)}  length ${pad(stats.length)}` +
              `${c.prefixOnly ? ` (${stats.prefixes} checked as prefixes)` : ''}  ` +
              `[${stats.requests} requests, ${stats.tokens} tokens, ${secs} s]`);
  return stats;
}

// Runs fn over items, at most `limit` at a time.
async function pool(items, limit, fn) {
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const i = next++;
      await fn(items[i], i);
    }
  });
  await Promise.all(workers);
}

// ---- the sampled suite -------------------------------------------------------------------------

const constraints = [
  ...SCHEMAS.map((s) => ({ kind: 'json', ...s, check: schemaChecker(s.schema) })),
  ...REGEXES.map((r) => ({ kind: 'regex', ...r, check: regexChecker(r.re), bounded: !r.maxTokens })),
  ...CHOICES.map((c) => ({ kind: 'choice', ...c, check: choiceChecker(c.list), bounded: true })),
  ...GRAMMARS.map((g) => ({ kind: 'grammar', ...g, check: g.recognize })),
];
// STRUCTURED_ONLY=regex runs only the constraints whose "kind name" matches (debugging).
const only = process.env.STRUCTURED_ONLY ? new RegExp(process.env.STRUCTURED_ONLY) : null;
const selected = only ? constraints.filter((c) => only.test(`${c.kind} ${c.name}`)) : constraints;
let checks = 0;
await pool(selected, CONCURRENCY, async (c) => {
  await runConstraint(c, constraints.indexOf(c));
  checks++;
});
console.log(`${selected.length} constraints sampled in ${((Date.now() - started) / 1000).toFixed(1)} s`);

// ---- one-off checks (all of them unless STRUCTURED_ONLY is set) ------------------------------------

async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    checks++;
    console.log(`pass ${name} [${((Date.now() - t0) / 1000).toFixed(1)} s]`);
  } catch (e) {
    fail(name, e.stack ?? String(e));
  }
}
function expect(cond, message) {
  if (!cond) throw new Error(message);
}

// response_format json_object: any JSON object, compact. A random model mostly closes it
// at once ("{}"), and almost never finishes one with members: the answers cut off by
// max_tokens are checked as prefixes of a JSON object instead.
async function jsonObjectCheck() {
  let objects = 0, nonEmpty = 0, prefixes = 0;
  const variants = [
    ['completions', { prompt: PROMPT, response_format: { type: 'json_object' }, n: 10 }],
    ['completions', { prompt: '\n', structured_outputs: { json_object: true }, n: 40 }],
    ['completions', { prompt: 'null', response_format: { type: 'json_object' }, n: 10 }],
    ['chat', { messages: MESSAGES, ...NO_THINKING, response_format: { type: 'json_object' }, n: 10 }],
    ['chat', { messages: [{ role: 'user', content: 'JSON' }], ...NO_THINKING, structured_outputs: { json_object: true }, n: 10 }],
  ];
  for (const [api, fields] of variants) {
    const body = { model, ...fields, seed: 5, temperature: 1.0, max_tokens: 60 };
    for (const [i, a] of answers(api, await send(api, body)).entries()) {
      const where = `choice ${i} of ${describe(api, body)}`;
      if (a.finish !== 'stop') {
        expect(a.finish === 'length' && isJsonPrefix(a.text, '{'), `${a.finish}: not a prefix of a compact JSON object: ${show(a.text)} (${where})`);
        prefixes++;
        continue;
      }
      let v;
      try { v = JSON.parse(a.text); } catch (e) { throw new Error(`not JSON: ${show(a.text)} (${where})`); }
      expect(v !== null && typeof v === 'object' && !Array.isArray(v), `not a JSON object: ${show(a.text)} (${where})`);
      expect(isCompact(a.text), `whitespace between JSON tokens: ${show(a.text)} (${where})`);
      objects++;
      if (Object.keys(v).length) nonEmpty++;
    }
  }
  console.log(`     json_object: ${objects} objects validated (${nonEmpty} with members), ${prefixes} cut off and checked as prefixes`);
  expect(objects >= MIN_VALID, `only ${objects} json_object answers finished`);
  expect(prefixes >= 10, `only ${prefixes} json_object answers were cut off: too few to check long objects`);
}

// The deltas of each choice of a streamed request, joined.
async function streamed(api, body) {
  const stream = await send(api, { ...body, stream: true });
  const texts = [], finishes = [];
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      const piece = api === 'chat' ? ch.delta?.content : ch.text;
      texts[ch.index] = (texts[ch.index] ?? '') + (piece ?? '');
      if (ch.finish_reason) finishes[ch.index] = ch.finish_reason;
    }
  }
  return texts.map((text, i) => ({ text, finish: finishes[i] }));
}

const named = (kind, name) => constraints.find((c) => c.kind === kind && c.name === name);

async function streamCheck(api, c, variant) {
  const body = request(api, c, variant, { n: 4, seed: 77, maxTokens: c.maxTokens ?? 300 });
  const plain = answers(api, await send(api, body));
  const live = await streamed(api, body);
  expect(live.length === plain.length, `${live.length} streamed choices, ${plain.length} plain (${describe(api, body)})`);
  let validated = 0;
  plain.forEach((p, i) => {
    expect(live[i].text === p.text,
           `choice ${i} streamed ${show(live[i].text)}, not ${show(p.text)} as unstreamed (${describe(api, body)})`);
    expect(live[i].finish === p.finish, `choice ${i} finished ${live[i].finish} streamed, ${p.finish} unstreamed`);
    if (p.finish !== 'stop') return;
    const why = c.check(live[i].text);
    expect(!why, `streamed choice ${i}: ${why}: ${show(live[i].text)} (${describe(api, body)})`);
    validated++;
  });
  expect(validated > 0, `no streamed answer finished (${describe(api, body)})`);
}

async function determinismCheck(api, c) {
  const body = request(api, c, 1, { n: 5, seed: 4242, maxTokens: c.maxTokens ?? 300 });
  const a = answers(api, await send(api, body)), b = answers(api, await send(api, body));
  expect(show(a) === show(b), `two runs of ${describe(api, body)} differ:\n${show(a)}\n${show(b)}`);
  expect(new Set(a.map((x) => x.text)).size > 1, `n=5 at temperature 1 gave one answer five times: ${show(a[0].text)}`);
  const other = answers(api, await send(api, { ...body, seed: 4243 }));
  expect(show(other) !== show(a), `seeds 4242 and 4243 gave the same answers (${describe(api, body)})`);
}

async function expect400(api, body, needles) {
  try {
    await send(api, body);
  } catch (e) {
    expect(e instanceof OpenAI.BadRequestError && e.status === 400, `${describe(api, body)}: ${e.status} ${e.message}, not a 400`);
    expect(e.error?.type === 'invalid_request_error', `${describe(api, body)}: error type ${e.error?.type}`);
    for (const needle of needles)
      expect(e.message.includes(needle), `${describe(api, body)}: the message "${e.message}" lacks "${needle}"`);
    return;
  }
  throw new Error(`${describe(api, body)} was accepted`);
}

if (!only) {
  await check('json_object (completions and chat)', jsonObjectCheck);

  for (const [api, kind, name, variant] of [['completions', 'json', 'person', 0],
                                            ['completions', 'json', 'tree ($defs, recursive)', 1],
                                            ['chat', 'json', 'oneOf (tagged)', 0],
                                            ['chat', 'json', 'formats date/time/date-time', 0],
                                            ['completions', 'regex', 'ipv4', 0],
                                            ['chat', 'grammar', 'settings list', 1]])
    await check(`stream == non-stream (${api}, ${kind} '${name}')`, () => streamCheck(api, named(kind, name), variant));

  for (const [kind, name] of [['json', 'tree ($defs, recursive)'], ['json', 'optional properties'],
                              ['regex', 'names'], ['grammar', 's-expressions']])
    for (const api of ['completions', 'chat'])
      await check(`same seed, same answers (${api}, ${kind} '${name}')`, () => determinismCheck(api, named(kind, name)));

  const base = { model, prompt: PROMPT, max_tokens: 5 };
  const chatBase = { model, messages: MESSAGES, max_tokens: 5, ...NO_THINKING };
  const rf = (schema) => ({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } });
  await check('unsupported JSON Schema keywords are 400s naming them', async () => {
    await expect400('completions', { ...base, guided_json: { type: 'array', items: { type: 'integer' }, uniqueItems: true } },
                    ["'uniqueItems'"]);
    await expect400('completions', { ...base, guided_json: closed({ n: { type: 'integer', multipleOf: 3 } }) },
                    ["'multipleOf'", '#/properties/n']);
    await expect400('chat', { ...chatBase, ...rf(closed({ a: { type: 'string', format: 'ipv4' } })) }, ["'ipv4'"]);
    await expect400('chat', { ...chatBase, ...rf({ type: 'object', patternProperties: { '^a': {} } }) }, ["'patternProperties'"]);
    await expect400('completions', { ...base, structured_outputs: { json: { not: { type: 'null' } } } }, ["'not'"]);
    await expect400('completions', { ...base, guided_json: { $ref: '#/$defs/missing' } }, ['#/$defs/missing']);
    await expect400('completions', { ...base, guided_json: { type: 'string', minLength: 2, pattern: 'x' } }, ["'pattern'", 'minLength']);
  });
  await check('two constraints at once are a 400', async () => {
    await expect400('completions', { ...base, guided_regex: 'a+', guided_choice: ['a'] }, ['guided_regex', 'guided_choice']);
    await expect400('chat', { ...chatBase, ...rf({ type: 'integer' }), guided_json: { type: 'integer' } },
                    ['response_format', 'guided_json']);
    await expect400('completions', { ...base, structured_outputs: { regex: 'a', choice: ['a'] } }, ['structured_outputs']);
    await expect400('completions', { ...base, response_format: { type: 'json_object' }, structured_outputs: { grammar: 'root ::= "a"' } },
                    ['response_format', 'structured_outputs']);
  });
  await check('invalid regexes are 400s', async () => {
    await expect400('completions', { ...base, guided_regex: '(abc' }, ['regex', "'('"]);
    await expect400('completions', { ...base, guided_regex: 'a{3,1}' }, ['regex', '{3,1}']);
    await expect400('chat', { ...chatBase, structured_outputs: { regex: '(?=lookahead)x' } }, ['regex', 'lookahead']);
    await expect400('completions', { ...base, guided_json: { type: 'string', pattern: '(\\w)\\1' } }, ['backreference', "'pattern'", 'json schema']);
  });
  await check('GBNF syntax errors are 400s', async () => {
    await expect400('completions', { ...base, guided_grammar: 'root ::= "unterminated' }, ['line 1']);
    await expect400('completions', { ...base, guided_grammar: 'root ::= "a" b\n\nb ::= c\n' }, ['line 3', "'c'"]);
    await expect400('chat', { ...chatBase, structured_outputs: { grammar: 'root ::= [a-z\n' } }, ['grammar line 1']);
    await expect400('completions', { ...base, guided_grammar: 'start ::= "x"' }, ["'root'"]);
  });
  await check('malformed constraint fields are 400s', async () => {
    await expect400('completions', { ...base, guided_choice: [] }, ['guided_choice']);
    await expect400('completions', { ...base, response_format: { type: 'xml' } }, ['xml']);
    await expect400('completions', { ...base, structured_outputs: { whitespace_pattern: ' ' } }, ['whitespace_pattern']);
    await expect400('chat', { ...chatBase, guided_whitespace_pattern: '\\s*' }, ['guided_whitespace_pattern']);
  });
}

// ---- summary -------------------------------------------------------------------------------------

const kinds = ['json', 'regex', 'choice', 'grammar'].map((k) => `${constraints.filter((c) => c.kind === k).length} ${k}`);
console.log(`${constraints.length} constraints (${kinds.join(', ')}) in ${((Date.now() - started) / 1000).toFixed(1)} s`);
if (failures.length) {
  console.log(`\n${failures.length} failure(s):`);
  for (const f of failures) console.log(`- ${f}`);
  process.exit(1);
}
console.log(`ok ${checks}`);
