#!/usr/bin/env python3
"""jinja_cases.py - writes tests/fixtures/jinja/cases.jsonl: small templates, one
construct each, with what Python's Jinja2 renders from them in the environment
transformers uses for chat templates (or the fact that it raises).

    python3 scripts/jinja_cases.py > tests/fixtures/jinja/cases.jsonl

Needs Jinja2 (any 3.1.x; not a dependency of the build or the tests: the
test reads the file). tests/test_jinja.c renders every case with
text/jinja and compares byte for byte; for a raising case it expects an
error whose message contains `error` (Python's own message, when the
interpreter words it the same, else a chosen part of it).
"""
import json
import sys
from datetime import datetime

from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = datetime(2024, 7, 26, 14, 0, 0)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    from jinja2.exceptions import TemplateError
    raise TemplateError(message)


ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
ENV.filters["tojson"] = tojson
ENV.globals["raise_exception"] = raise_exception
ENV.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)

MSGS = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}]

# (name, template, variables, error substring or None)
CASES = [
    # --- text, comments, raw, whitespace control
    ("text", "plain text", {}, None),
    ("comment", "a{# gone #}b", {}, None),
    ("raw", "{% raw %}{{ not }}{% endraw %}", {}, None),
    ("trim-blocks", "{% if true %}\nyes\n{% endif %}\nend", {}, None),
    ("lstrip-blocks", "  {% if true %}\n  x\n  {% endif %}\n", {}, None),
    ("dash-left", "a   {{- 'b' }}", {}, None),
    ("dash-right", "{{ 'a' -}}   \n  b", {}, None),
    ("dash-block", "x\n  {%- if true -%}\n  y  \n{%- endif %}", {}, None),
    ("plus-keeps", "  {%+ if true %}x{% endif %}", {}, None),
    ("trailing-newline", "line\n", {}, None),
    ("crlf", "a\r\nb{% if true %}\r\nc{% endif %}", {}, None),
    ("comment-lstrip", "  {# c #}\nx", {}, None),
    # --- literals and printing
    ("none-true", "{{ none }} {{ None }} {{ true }} {{ True }} {{ false }}", {}, None),
    ("numbers", "{{ 1 }} {{ 1.5 }} {{ 1e3 }} {{ 0.1 + 0.2 }} {{ 1_000 }} {{ 10 / 4 }} {{ 10 // 4 }}", {}, None),
    ("float-repr", "{{ 1e16 }} {{ 1e-5 }} {{ 123456789.0 }} {{ 2.0 }} {{ -0.0 }}", {}, None),
    ("strings", "{{ 'a\\'b' }} {{ \"c\\\"d\" }} {{ 'tab\\tx' }} {{ 'u\\u00e9' }}", {}, None),
    ("list-print", "{{ [1, 'a', none, true, 1.0, [2]] }}", {}, None),
    ("dict-print", "{{ {'a': 1, 'b': 'x', 'c': none} }}", {}, None),
    ("tuple-print", "{{ (1, 2) }} {{ (1,) }}", {}, None),
    ("string-repr-quotes", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"'] }}", {}, None),
    ("unicode-repr", "{{ ['é', '\\n', '\\x01'] }}", {}, None),
    # --- arithmetic and operators
    ("arith", "{{ 7 % 3 }} {{ -7 % 3 }} {{ -7 // 2 }} {{ 2 ** 10 }} {{ 7.5 % 2 }} {{ -3 }}", {}, None),
    ("concat", "{{ 'a' ~ 1 ~ none }} {{ 'a' + 'b' }} {{ [1] + [2] }} {{ 'ab' * 3 }}", {}, None),
    ("compare", "{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 != 2 }}", {}, None),
    ("logic", "{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not 0 }} {{ none or [] }} {{ '' and 1 }}", {}, None),
    ("in", "{{ 'a' in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}", {}, None),
    ("conditional", "{{ 'y' if x else 'n' }} {{ 'y' if not x }}|", {"x": 0}, None),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ not 1 == 2 }} {{ -2 ** 2 }}", {}, None),
    ("str-plus-int", "{{ 'a' + 1 }}", {}, "can only concatenate str"),
    ("div-zero", "{{ 1 / 0 }}", {}, "division by zero"),
    # --- variables, attributes, subscripts, slices
    ("attr-key", "{{ m.role }} {{ m['content'] }} {{ m.get('role') }} {{ m.missing }}|", {"m": {"role": "user", "content": "c"}}, None),
    ("index", "{{ xs[0] }} {{ xs[-1] }} {{ s[1] }} {{ s[-1] }}", {"xs": [1, 2, 3], "s": "héllo"}, None),
    ("slice", "{{ xs[1:] }} {{ xs[:-1] }} {{ xs[::-1] }} {{ xs[::2] }} {{ s[::-1] }} {{ xs[5:] }}", {"xs": [1, 2, 3, 4], "s": "abc"}, None),
    ("slice-neg-step", "{{ xs[3:0:-1] }} {{ xs[-2::-2] }}", {"xs": [0, 1, 2, 3, 4]}, None),
    ("index-out", "{{ xs[5] }}|", {"xs": [1]}, None),
    ("undefined-print", "[{{ nope }}]", {}, None),
    ("undefined-attr", "{{ nope.x }}", {}, "'nope' is undefined"),
    ("none-attr", "[{{ n.x }}]", {"n": None}, None),
    ("none-attr-attr", "{{ n.x.y }}", {"n": None}, "'None' has no attribute 'x'"),
    ("undefined-add", "{{ nope + 1 }}", {}, "'nope' is undefined"),
    ("undefined-iter", "{% for x in nope %}{{ x }}{% endfor %}ok", {}, None),
    ("undefined-tests", "{{ nope is defined }} {{ nope is undefined }} {{ nope | default('d') }}", {}, None),
    ("dict-method-vs-key", "{{ d.items is callable }}|{{ d['items'] }}", {"d": {"items": 5}}, None),
    # --- if / for / loop
    ("if-elif-else", "{% for x in [1, 2, 3] %}{% if x == 1 %}a{% elif x == 2 %}b{% else %}c{% endif %}{% endfor %}", {}, None),
    ("loop-vars", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}", {}, None),
    ("loop-prev-next", "{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}", {}, None),
    ("loop-cycle", "{% for x in range(4) %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}, None),
    ("loop-changed", "{% for x in [1, 1, 2] %}{{ loop.changed(x) }} {% endfor %}", {}, None),
    ("loop-filter", "{% for x in range(10) if x is odd %}{{ x }}{% endfor %}", {}, None),
    ("loop-filter-length", "{% for x in range(10) if x > 6 %}{{ loop.length }}{{ loop.last }} {% endfor %}", {}, None),
    ("loop-else", "{% for x in [] %}{{ x }}{% else %}empty{% endfor %}", {}, None),
    ("loop-break-continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}, None),
    ("loop-dict", "{% for k in d %}{{ k }}{% endfor %} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}, None),
    ("loop-unpack", "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}", {}, None),
    ("loop-nested", "{% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ x }}{{ y }} {% endfor %}{{ loop.index }}|{% endfor %}", {}, None),
    ("loop-recursive", "{% for n in tree recursive %}{{ n.name }}{% if n.kids %}({{ loop(n.kids) }}){% endif %}{% endfor %}", {"tree": [{"name": "a", "kids": [{"name": "b"}, {"name": "c", "kids": [{"name": "d"}]}]}]}, None),
    ("loop-depth", "{% for n in tree recursive %}{{ loop.depth }}{{ loop.depth0 }}{% if n.kids %}{{ loop(n.kids) }}{% endif %}{% endfor %}", {"tree": [{"kids": [{}]}]}, None),
    ("for-none", "{% for x in n %}{% endfor %}", {"n": None}, "'NoneType' object is not iterable"),
    ("for-int", "{% for x in 3 %}{% endfor %}", {}, "'int' object is not iterable"),
    # --- set, scoping, namespace
    ("set", "{% set x = 1 %}{% set y, z = 2, 3 %}{{ x }}{{ y }}{{ z }}", {}, None),
    ("set-block", "{% set b %}in {{ 1 + 1 }}{% endset %}[{{ b }}]", {}, None),
    ("set-block-filter", "{% set b | upper %}shout{% endset %}{{ b }}", {}, None),
    ("set-in-loop", "{% set x = 0 %}{% for i in range(3) %}{% set x = x + i %}{% endfor %}{{ x }}", {}, None),
    ("namespace", "{% set ns = namespace(x=0, s='') %}{% for i in range(3) %}{% set ns.x = ns.x + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.x }} {{ ns.s }}", {}, None),
    ("namespace-missing", "{% set ns = namespace() %}{{ ns.nope }}|{{ ns.nope is defined }}", {}, None),
    ("set-attr-not-ns", "{% set d = {} %}{% set d.x = 1 %}", {}, "non-namespace object"),
    ("if-scope", "{% if true %}{% set x = 5 %}{% endif %}{{ x }}", {}, None),
    ("with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}, None),
    # --- macros and calls
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', '?') }} {{ greet(name='C', punct='.') }}", {}, None),
    ("macro-varargs", "{% macro f() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, k=3) }}", {}, None),
    ("macro-caller", "{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}body{% endcall %}", {}, None),
    ("macro-caller-args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}[{{ v }}]{% endcall %}", {}, None),
    ("macro-outer-scope", "{% set g = 'G' %}{% macro m() %}{{ g }}{% endmacro %}{{ m() }}", {}, None),
    ("macro-recursion", "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", {}, None),
    ("macro-too-many", "{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", {}, "takes not more than 1 argument"),
    ("macro-returns-markup", "{% macro f() %}x{% endmacro %}{{ f() | length }} {{ f() ~ 'y' }}", {}, None),
    ("filter-block", "{% filter upper %}abc {{ 'd' }}{% endfilter %}", {}, None),
    # --- filters
    ("f-trim-length", "[{{ '  x  ' | trim }}] {{ 'héllo' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }}", {}, None),
    ("f-trim-chars", "{{ 'xxhixx' | trim('x') }}", {}, None),
    ("f-first-last", "{{ [1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ [] | first }}|", {}, None),
    ("f-join", "{{ [1, 'a', none] | join(', ') }} {{ 'abc' | join('-') }} {{ ms | join(',', attribute='role') }}", {"ms": MSGS}, None),
    ("f-map", "{{ ms | map(attribute='role') | list }} {{ ['a', 'b'] | map('upper') | join }} {{ ms | map(attribute='x', default='?') | list }}", {"ms": MSGS}, None),
    ("f-select", "{{ range(6) | select('odd') | list }} {{ range(6) | reject('even') | list }} {{ [0, 1, '', 'a'] | select | list }}", {}, None),
    ("f-selectattr", "{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ ms | rejectattr('role', 'eq', 'user') | list | length }}", {"ms": MSGS}, None),
    ("f-selectattr-truthy", "{{ xs | selectattr('t') | list }}", {"xs": [{"t": 1}, {"t": 0}, {"t": "a"}]}, None),
    ("f-items", "{{ {'a': 1, 'b': 2} | items | list }}", {}, None),
    ("f-items-undefined", "{{ nope | items | list }}", {}, None),
    ("f-items-bad", "{{ 'ab' | items | list }}", {}, "Can only get item pairs from a mapping."),
    ("f-list-string", "{{ 'ab' | list }} {{ 12 | string }} {{ none | string }} {{ [1] | string }}", {}, None),
    ("f-int-float", "{{ '42' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '0x1A' | int(0, 16) }} {{ '2.5' | float }} {{ 'y' | float }} {{ 1 | float }}", {}, None),
    ("f-case", "{{ 'hello world' | upper }} {{ 'HeLLo' | lower }} {{ 'hello WORLD' | capitalize }} {{ \"it's a dog-eat-dog\" | title }}", {}, None),
    ("f-replace", "{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'abc' | replace('', '-') }}", {}, None),
    ("f-default", "{{ x | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | default('d') }} {{ x | d('short') }}", {}, None),
    ("f-sort", "{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }}", {}, None),
    ("f-sort-attr", "{{ xs | sort(attribute='k') | map(attribute='v') | join }}", {"xs": [{"k": 2, "v": "b"}, {"k": 1, "v": "a"}, {"k": 2, "v": "c"}]}, None),
    ("f-dictsort", "{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }} {{ {'b': 1, 'a': 2} | dictsort(by='value') }}", {}, None),
    ("f-unique", "{{ [1, 2, 1, 3, 2] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }}", {}, None),
    ("f-reverse", "{{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }}", {}, None),
    ("f-indent", "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, first=true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ 'x\\ny' | indent('> ') }}", {}, None),
    ("f-safe-escape", "{{ '<b>' | safe }} {{ '<a & \"b\">' | e }}", {}, None),
    ("f-abs-round", "{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.7 | round(0, 'floor') }} {{ 2.1 | round(method='ceil') }} {{ 5 | round }}", {}, None),
    ("f-wordcount", "{{ 'one two  three\\nfour' | wordcount }}", {}, None),
    ("f-batch", "{{ range(5) | batch(2) | list }} {{ range(5) | batch(2, 'x') | list }}", {}, None),
    ("f-slice", "{{ range(5) | slice(2) | list }}", {}, None),
    ("f-min-max-sum", "{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [1, 2, 3] | sum }} {{ xs | sum(attribute='n') }} {{ ['b', 'A'] | min }}", {"xs": [{"n": 1}, {"n": 2.5}]}, None),
    ("f-attr", "[{{ m | attr('role') }}] {{ m | attr('get') is callable }}", {"m": {"role": "r"}}, None),
    ("f-attr-namespace", "{% set ns = namespace(x=3) %}{{ ns | attr('x') }}", {}, None),
    ("f-center-truncate", "[{{ 'ab' | center(6) }}] {{ 'hello world foo' | truncate(9) }}", {}, None),
    ("f-format", "{{ '%s-%d-%.2f' | format('a', 3, 1.5) }} {{ '%s' % 'x' }} {{ '%s and %s' % ('a', 'b') }} {{ '%5.1f|%-4d|%03d' % (3.14159, 7, 5) }}", {}, None),
    ("f-tojson", "{{ x | tojson }}", {"x": {"b": [1, 2.5, None, True, "é\n\"q\""], "a": {}}}, None),
    ("f-tojson-indent", "{{ x | tojson(indent=2) }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson(indent=2) }}", {"x": {"a": [1, {"b": None}]}}, None),
    ("f-tojson-separators", "{{ x | tojson(separators=(',', ':')) }} {{ x | tojson(sort_keys=true) }}", {"x": {"b": 1, "a": [1, 2]}}, None),
    ("f-tojson-floats", "{{ [1.0, 0.1, 1e-7, 1e16, 1.5e300, 123.456, 1e-4, 2.5e-05, 1e22] | tojson }}", {}, None),
    ("f-tojson-escapes", "{{ s | tojson }}", {"s": "\u0001\u001f\u007f\u2028/\\\t\r\b\f"}, None),
    ("f-tojson-undefined", "{{ nope | tojson }}", {}, "is not JSON serializable"),
    ("f-unknown", "{{ 1 | nosuchfilter }}", {}, "No filter named 'nosuchfilter'"),
    # --- tests
    ("tests-types", "{{ 'a' is string }} {{ 1 is number }} {{ 1.0 is number }} {{ true is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ none is none }} {{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is iterable }} {{ 'a' is iterable }}", {}, None),
    ("tests-values", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 2 is gt 1 }} {{ 2 is ge 3 }} {{ 1 is lt 2 }} {{ 1 is le 0 }} {{ 1 is in [1] }} {{ 'a' is lower }} {{ 'A' is upper }} {{ f is callable }} {{ 1 is sameas 1 }}", {"f": None}, None),
    ("tests-defined", "{{ x is defined }} {{ m.a is defined }} {{ m.b is defined }} {{ m.b is not defined }}", {"m": {"a": 1}}, None),
    ("test-unknown", "{{ 1 is nosuchtest }}", {}, "No test named 'nosuchtest'"),
    # --- string methods
    ("m-strip", "[{{ '  a  '.strip() }}] [{{ 'xxaxx'.strip('x') }}] [{{ '\\n a \\n'.lstrip() }}] [{{ 'ab\\n\\n'.rstrip('\\n') }}] [{{ 'abcba'.strip('ab') }}]", {}, None),
    ("m-split", "{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }}", {}, None),
    ("m-split-empty-sep", "{{ 'ab'.split('') }}", {}, "empty separator"),
    ("m-starts-ends", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.startswith('l', 2) }}", {}, None),
    ("m-find-count", "{{ 'banana'.find('an') }} {{ 'banana'.rfind('an') }} {{ 'banana'.find('x') }} {{ 'banana'.count('a') }} {{ 'banana'.index('n') }}", {}, None),
    ("m-case", "{{ 'aB'.upper() }} {{ 'aB'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aB'.swapcase() }}", {}, None),
    ("m-replace", "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }}", {}, None),
    ("m-format", "{{ '{}-{}'.format(1, 'a') }} {{ '{0}{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='n') }} {{ '{{}}{}'.format(1) }}", {}, None),
    ("m-is", "{{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ ' '.isspace() }} {{ 'Ab'.islower() }} {{ 'AB'.isupper() }} {{ 'a1'.isalnum() }}", {}, None),
    ("m-join-misc", "{{ '-'.join(['a', 'b']) }} {{ 'ab'.center(6, '*') }} {{ 'a'.ljust(3, '.') }} {{ 'a'.rjust(3) }} {{ '5'.zfill(3) }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.py'.removesuffix('.py') }}", {}, None),
    ("m-splitlines", "{{ 'a\\nb\\r\\nc'.splitlines() }}", {}, None),
    ("m-unicode", "{{ 'ÉCOLE'.lower() }} {{ 'straße'.upper() }} {{ 'ǆ'.title() }}", {}, None),
    # --- dict and list methods
    ("m-dict", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 0) }}", {"d": {"a": 1, "b": 2}}, None),
    ("m-dict-iter", "{% for k, v in d.items() %}{{ k }}{{ v }}{% endfor %}", {"d": {"x": 1, "y": 2}}, None),
    ("m-list-append", "{% set xs = [] %}{{ xs.append(1) }}", {}, "unsafe"),
    ("m-list-misc", "{{ xs.index(2) }} {{ xs.count(1) }}", {"xs": [1, 2, 1]}, None),
    # --- globals
    ("g-range", "{{ range(3) | list }} {{ range(1, 4) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }}", {}, None),
    ("g-dict", "{{ dict(a=1, b='x') }} {{ dict() }}", {}, None),
    ("g-raise", "{{ raise_exception('Custom: bad role') }}", {}, "Custom: bad role"),
    ("g-strftime", "{{ strftime_now('%Y-%m-%d %d %b %Y %A') }}", {}, None),
    ("g-range-sandbox", "{{ range(100001) | length }}", {}, "Range too big"),
    # --- sandbox: mutation is refused, attribute access of internals too
    ("sandbox-update", "{% set d = {} %}{{ d.update({'a': 1}) }}", {}, "unsafe"),
    ("sandbox-dunder", "{{ ''.__class__ }}|", {}, None),
    # --- syntax errors
    ("syntax-unclosed", "{% if x %}never closed", {}, "Unexpected end of template"),
    ("syntax-unknown-tag", "{% frobnicate %}", {}, "frobnicate"),
    ("syntax-bad-expr", "{{ 1 + }}", {}, "unexpected"),
    ("syntax-endfor", "{% for x in y %}{% endif %}", {}, "endif"),
    # --- a chat-template-shaped program
    ("chatml", "{% for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content | trim + '<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}", {"messages": MSGS, "add_generation_prompt": True}, None),
    ("last-user-index", "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.last = loop.index0 %}{% endif %}{% endfor %}{{ ns.last }} {{ messages[ns.last].content }}", {"messages": MSGS}, None),
]


def main():
    out = sys.stdout
    for name, source, variables, error in CASES:
        row = {"name": name, "template": source, "vars": variables}
        try:
            text = ENV.from_string(source).render(**variables)
            if error is not None:
                sys.exit(f"{name}: expected an error containing {error!r}, rendered {text!r}")
            row["expected"] = text
        except Exception as e:  # the case records that Jinja2 raises
            if error is None:
                sys.exit(f"{name}: raised {type(e).__name__}: {e}")
            row["error"] = error
            row["python_error"] = f"{type(e).__name__}: {e}"
        out.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
