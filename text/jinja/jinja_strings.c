/*
 * jinja_strings.c - Python's str methods, as templates call them
 * (s.strip('\n'), s.split('</think>')[-1], "{}".format(x), "%s" % x).
 *
 * Hand-written (see jinja.h). Python's exact behaviour: indices count code
 * points; strip/split without an argument use Unicode whitespace; split
 * with maxsplit keeps the rest whole; replace("", x) inserts x between
 * characters; title() capitalises after any uncased character;
 * upper/lower map code point by code point (utf8proc).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "jinja_internal.h"
#include "jinja_special_casing.h"

bool py_isspace_cp(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

void jinja_py_strip(const char *s, size_t n, size_t *start, size_t *end) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t next = lo;
        if (!py_isspace_cp(jinja_utf8_next(s, hi, &next))) break;
        lo = next;
    }
    while (hi > lo) { /* step back over one character: its first byte is not 10xxxxxx */
        size_t at = hi - 1;
        while (at > lo && ((unsigned char)s[at] & 0xC0) == 0x80) at--;
        size_t tmp = at;
        if (!py_isspace_cp(jinja_utf8_next(s, hi, &tmp))) break;
        hi = at;
    }
    *start = lo;
    *end = hi;
}

const JStr *jinja_need_str(JRender *r, JValue v, const char *what) {
    if (v.type == JT_UNDEFINED) jv_raise_undefined(r, v);
    if (v.type != JT_STR) jinja_fail(r, "%s must be str, not %s", what, jv_type_name(v));
    return v.s;
}

void jinja_put_cp(JRender *r, JBuf *b, uint32_t cp) {
    utf8proc_uint8_t enc[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, enc);
    jbuf_put(r, b, (const char *)enc, (size_t)n);
}

typedef enum { CASE_UPPER, CASE_LOWER, CASE_TITLE } CaseMap;

static bool is_cased(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

/* Unicode's Case_Ignorable: marks, format characters, modifiers, and the
 * punctuation inside words (apostrophes, periods, colons). */
static bool is_case_ignorable(uint32_t cp) {
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    if (c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
        c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK)
        return true;
    static const uint32_t inside_words[] = {0x27, 0x2E, 0x3A, 0xB7, 0x2018, 0x2019, 0x2024, 0xFE13,
                                            0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A};
    for (size_t i = 0; i < sizeof inside_words / sizeof *inside_words; i++)
        if (cp == inside_words[i]) return true;
    return false;
}

/* Python lowers a capital sigma to the final form at the end of a word: a
 * cased letter before it, none after (case-ignorable characters skipped). */
static bool is_final_sigma(const char *s, size_t n, size_t at, size_t next) {
    bool cased_before = false;
    for (size_t end = at; end > 0 && !cased_before;) {
        size_t start = end - 1;
        while (start > 0 && ((unsigned char)s[start] & 0xC0) == 0x80) start--;
        size_t i = start;
        uint32_t cp = jinja_utf8_next(s, end, &i);
        if (!is_case_ignorable(cp)) {
            if (!is_cased(cp)) return false;
            cased_before = true;
        }
        end = start;
    }
    if (!cased_before) return false;
    for (size_t i = next; i < n;) {
        uint32_t cp = jinja_utf8_next(s, n, &i);
        if (!is_case_ignorable(cp)) return !is_cased(cp);
    }
    return true;
}

static const SpecialCasing *special_casing(uint32_t cp) {
    size_t lo = 0, hi = sizeof SPECIAL_CASING / sizeof *SPECIAL_CASING;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (SPECIAL_CASING[mid].cp == cp) return &SPECIAL_CASING[mid];
        if (SPECIAL_CASING[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Python's full case mapping of the character cp at s[at, next). */
static void put_case(JRender *r, JBuf *b, const char *s, size_t n, size_t at, size_t next, CaseMap m) {
    size_t i = at;
    uint32_t cp = jinja_utf8_next(s, n, &i);
    const SpecialCasing *sc = m == CASE_LOWER ? NULL : special_casing(cp);
    if (sc) {
        const uint32_t *seq = m == CASE_UPPER ? sc->upper : sc->title;
        for (int k = 0; k < 3 && seq[k]; k++) jinja_put_cp(r, b, seq[k]);
    } else if (m == CASE_LOWER && cp == 0x130) { /* İ: i and a combining dot */
        jinja_put_cp(r, b, 0x69);
        jinja_put_cp(r, b, 0x307);
    } else if (m == CASE_LOWER && cp == 0x3A3) {
        jinja_put_cp(r, b, is_final_sigma(s, n, at, next) ? 0x3C2 : 0x3C3);
    } else {
        utf8proc_int32_t c = (utf8proc_int32_t)cp;
        jinja_put_cp(r, b, (uint32_t)(m == CASE_UPPER ? utf8proc_toupper(c) : m == CASE_LOWER ? utf8proc_tolower(c)
                                                                        : utf8proc_totitle(c)));
    }
}

/* upper, lower, title, capitalize and swapcase of a whole string. */
typedef enum { WHOLE_UPPER, WHOLE_LOWER, WHOLE_TITLE, WHOLE_CAPITALIZE, WHOLE_SWAPCASE } WholeCase;

static JValue map_whole(JRender *r, JValue s, WholeCase how) {
    const JStr *str = jinja_need_str(r, s, "the value");
    JBuf b = {0};
    bool prev_cased = false;
    for (size_t i = 0; i < str->len;) {
        size_t at = i;
        uint32_t cp = jinja_utf8_next(str->s, str->len, &i);
        CaseMap m = how == WHOLE_UPPER ? CASE_UPPER
                    : how == WHOLE_LOWER ? CASE_LOWER
                    : how == WHOLE_TITLE ? (prev_cased ? CASE_LOWER : CASE_TITLE)
                    : how == WHOLE_CAPITALIZE ? (at == 0 ? CASE_TITLE : CASE_LOWER)
                    : utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_LU ? CASE_LOWER
                                                                                      : CASE_UPPER;
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        if (how == WHOLE_SWAPCASE && cat != UTF8PROC_CATEGORY_LU && cat != UTF8PROC_CATEGORY_LL)
            jbuf_put(r, &b, str->s + at, i - at);
        else put_case(r, &b, str->s, str->len, at, i, m);
        prev_cased = is_cased(cp);
    }
    return jbuf_value(r, &b);
}

JValue py_upper(JRender *r, JValue s) { return map_whole(r, s, WHOLE_UPPER); }
JValue py_lower(JRender *r, JValue s) { return map_whole(r, s, WHOLE_LOWER); }
static JValue py_title(JRender *r, JValue s) { return map_whole(r, s, WHOLE_TITLE); }
static JValue py_capitalize(JRender *r, JValue s) { return map_whole(r, s, WHOLE_CAPITALIZE); }

/* Is cp among the characters of set (None: whitespace)? */
static bool in_set(uint32_t cp, const JStr *set) {
    if (!set) return py_isspace_cp(cp);
    for (size_t i = 0; i < set->len;)
        if (jinja_utf8_next(set->s, set->len, &i) == cp) return true;
    return false;
}

JValue py_strip(JRender *r, JValue s, JValue chars, bool left, bool right) {
    const JStr *str = jinja_need_str(r, s, "the value");
    const JStr *set = chars.type == JT_NONE || chars.type == JT_UNDEFINED ? NULL : jinja_need_str(r, chars, "strip arg");
    size_t start = 0, end = str->len;
    if (left)
        while (start < end) {
            size_t next = start;
            if (!in_set(jinja_utf8_next(str->s, end, &next), set)) break;
            start = next;
        }
    if (right)
        while (end > start) {
            size_t at = end - 1;
            while (at > start && ((unsigned char)str->s[at] & 0xC0) == 0x80) at--;
            size_t tmp = at;
            if (!in_set(jinja_utf8_next(str->s, end, &tmp), set)) break;
            end = at;
        }
    return start == 0 && end == str->len ? s : jv_str(r, str->s + start, end - start);
}

static const char *find_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m == 0) return hay;
    for (size_t i = 0; i + m <= n; i++)
        if (hay[i] == needle[0] && memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

static const char *rfind_bytes(const char *hay, size_t n, const char *needle, size_t m) {
    if (m > n) return NULL;
    for (size_t i = n - m + 1; i-- > 0;)
        if (memcmp(hay + i, needle, m) == 0) return hay + i;
    return NULL;
}

JValue py_replace(JRender *r, JValue s, JValue old, JValue new_, int64_t count) {
    const JStr *str = jinja_need_str(r, s, "the value"), *o = jinja_need_str(r, old, "replace arg 1"), *w = jinja_need_str(r, new_, "replace arg 2");
    JBuf b = {0};
    if (o->len == 0) { /* "abc".replace("", "-") == "-a-b-c-" */
        size_t i = 0;
        while (i <= str->len && count != 0) {
            jbuf_put(r, &b, w->s, w->len);
            count--;
            if (i == str->len) {
                i++;
                break;
            }
            size_t at = i;
            jinja_utf8_next(str->s, str->len, &i);
            jbuf_put(r, &b, str->s + at, i - at);
        }
        if (i <= str->len) jbuf_put(r, &b, str->s + i, str->len - i);
        return jbuf_value(r, &b);
    }
    size_t pos = 0;
    const char *hit;
    while (count != 0 && (hit = find_bytes(str->s + pos, str->len - pos, o->s, o->len))) {
        size_t at = (size_t)(hit - str->s);
        jbuf_put(r, &b, str->s + pos, at - pos);
        jbuf_put(r, &b, w->s, w->len);
        pos = at + o->len;
        count--;
    }
    jbuf_put(r, &b, str->s + pos, str->len - pos);
    return jbuf_value(r, &b);
}

/* split/rsplit; sep NULL: runs of whitespace */
static JValue py_split(JRender *r, const JStr *s, const JStr *sep, int64_t maxsplit, bool from_right) {
    JValue out = jv_list(r, 0);
    if (sep && sep->len == 0) jinja_fail(r, "empty separator");
    if (!sep) {
        /* pieces between whitespace runs, found left to right (or right to left) */
        size_t lo = 0, hi = s->len;
        JValue parts = jv_list(r, 0);
        while (lo < hi) {
            if (from_right) {
                size_t end = hi;
                while (end > lo) { /* skip trailing whitespace */
                    size_t at = end - 1;
                    while (at > lo && ((unsigned char)s->s[at] & 0xC0) == 0x80) at--;
                    size_t tmp = at;
                    if (!py_isspace_cp(jinja_utf8_next(s->s, end, &tmp))) break;
                    end = at;
                }
                if (end == lo) break;
                if (maxsplit == 0) {
                    jv_list_push(r, parts.l, jv_str(r, s->s + lo, end - lo));
                    break;
                }
                size_t start = end;
                while (start > lo) {
                    size_t at = start - 1;
                    while (at > lo && ((unsigned char)s->s[at] & 0xC0) == 0x80) at--;
                    size_t tmp = at;
                    if (py_isspace_cp(jinja_utf8_next(s->s, start, &tmp))) break;
                    start = at;
                }
                jv_list_push(r, parts.l, jv_str(r, s->s + start, end - start));
                hi = start;
                maxsplit--;
            } else {
                size_t start = lo;
                while (start < hi) {
                    size_t next = start;
                    if (!py_isspace_cp(jinja_utf8_next(s->s, hi, &next))) break;
                    start = next;
                }
                if (start == hi) break;
                if (maxsplit == 0) {
                    jv_list_push(r, parts.l, jv_str(r, s->s + start, hi - start));
                    break;
                }
                size_t end = start;
                while (end < hi) {
                    size_t next = end;
                    if (py_isspace_cp(jinja_utf8_next(s->s, hi, &next))) break;
                    end = next;
                }
                jv_list_push(r, parts.l, jv_str(r, s->s + start, end - start));
                lo = end;
                maxsplit--;
            }
        }
        if (!from_right) return parts;
        for (size_t i = parts.l->n; i-- > 0;) jv_list_push(r, out.l, parts.l->items[i]);
        return out;
    }
    if (!from_right) {
        size_t pos = 0;
        const char *hit;
        while (maxsplit != 0 && (hit = find_bytes(s->s + pos, s->len - pos, sep->s, sep->len))) {
            size_t at = (size_t)(hit - s->s);
            jv_list_push(r, out.l, jv_str(r, s->s + pos, at - pos));
            pos = at + sep->len;
            maxsplit--;
        }
        jv_list_push(r, out.l, jv_str(r, s->s + pos, s->len - pos));
        return out;
    }
    JValue parts = jv_list(r, 0);
    size_t end = s->len;
    const char *hit;
    while (maxsplit != 0 && (hit = rfind_bytes(s->s, end, sep->s, sep->len))) {
        size_t at = (size_t)(hit - s->s);
        jv_list_push(r, parts.l, jv_str(r, s->s + at + sep->len, end - at - sep->len));
        end = at;
        maxsplit--;
    }
    jv_list_push(r, parts.l, jv_str(r, s->s, end));
    for (size_t i = parts.l->n; i-- > 0;) jv_list_push(r, out.l, parts.l->items[i]);
    return out;
}

/* Python's str.splitlines() line ends. */
static size_t line_end(const char *s, size_t n, size_t i, size_t *next) {
    while (i < n) {
        size_t at = i;
        uint32_t cp = jinja_utf8_next(s, n, &i);
        if (cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
            cp == 0x85 || cp == 0x2028 || cp == 0x2029) {
            if (cp == '\r' && i < n && s[i] == '\n') i++;
            *next = i;
            return at;
        }
    }
    *next = n;
    return n;
}

static JValue py_splitlines(JRender *r, const JStr *s) {
    JValue out = jv_list(r, 0);
    size_t i = 0;
    while (i < s->len) {
        size_t next, end = line_end(s->s, s->len, i, &next);
        jv_list_push(r, out.l, jv_str(r, s->s + i, end - i));
        i = next;
    }
    return out;
}

/* Jinja2's indent filter: s += "\n", then splitlines, indenting what it should. */
JValue py_splitlines_join(JRender *r, JValue s, const char *indent, bool first, bool blank) {
    JValue str = jv_to_str(r, s);
    JBuf with_nl = {0};
    jbuf_put(r, &with_nl, str.s->s, str.s->len);
    jbuf_put(r, &with_nl, "\n", 1);
    JList *lines = py_splitlines(r, jbuf_value(r, &with_nl).s).l;
    JBuf b = {0};
    if (first) jbuf_puts(r, &b, indent);
    for (size_t i = 0; i < lines->n; i++) {
        const JStr *line = lines->items[i].s;
        if (i) {
            jbuf_put(r, &b, "\n", 1);
            if (blank || line->len) jbuf_puts(r, &b, indent);
        }
        jbuf_put(r, &b, line->s, line->len);
    }
    return jbuf_value(r, &b);
}

/* ---- the method table for str ------------------------------------------------------------------------------ */

static JValue m_upper(JRender *r, JValue s, JArgs *a) { (void)a; return py_upper(r, s); }
static JValue m_lower(JRender *r, JValue s, JArgs *a) { (void)a; return py_lower(r, s); }
static JValue m_title(JRender *r, JValue s, JArgs *a) { (void)a; return py_title(r, s); }
static JValue m_capitalize(JRender *r, JValue s, JArgs *a) { (void)a; return py_capitalize(r, s); }
static JValue m_strip(JRender *r, JValue s, JArgs *a) { return py_strip(r, s, jarg(a, 0, "chars", jv_none()), true, true); }
static JValue m_lstrip(JRender *r, JValue s, JArgs *a) { return py_strip(r, s, jarg(a, 0, "chars", jv_none()), true, false); }
static JValue m_rstrip(JRender *r, JValue s, JArgs *a) { return py_strip(r, s, jarg(a, 0, "chars", jv_none()), false, true); }
static JValue m_splitlines(JRender *r, JValue s, JArgs *a) { (void)a; return py_splitlines(r, s.s); }

static JValue do_split(JRender *r, JValue s, JArgs *a, bool right) {
    JValue sep = jarg(a, 0, "sep", jv_none()), max = jarg(a, 1, "maxsplit", jv_int(-1));
    return py_split(r, s.s, sep.type == JT_NONE ? NULL : jinja_need_str(r, sep, "the separator"), jv_as_int(r, max, "maxsplit"), right);
}
static JValue m_split(JRender *r, JValue s, JArgs *a) { return do_split(r, s, a, false); }
static JValue m_rsplit(JRender *r, JValue s, JArgs *a) { return do_split(r, s, a, true); }

/* Byte bounds of s[start:end] (character indices, Python's clamping). */
static void char_range(JRender *r, const JStr *s, JValue start, JValue end, size_t *lo, size_t *hi) {
    int64_t n = (int64_t)jinja_utf8_count(s->s, s->len);
    int64_t a = start.type == JT_NONE || start.type == JT_UNDEFINED ? 0 : jv_as_int(r, start, "start");
    int64_t b = end.type == JT_NONE || end.type == JT_UNDEFINED ? n : jv_as_int(r, end, "end");
    if (a < 0) a = a + n < 0 ? 0 : a + n;
    if (b < 0) b = b + n < 0 ? 0 : b + n;
    if (a > n) a = n;
    if (b > n) b = n;
    *lo = jinja_utf8_offset(s->s, s->len, a);
    *hi = b < a ? *lo : jinja_utf8_offset(s->s, s->len, b);
}

static JValue affix(JRender *r, JValue s, JArgs *a, bool prefix) {
    JValue want = jarg(a, 0, prefix ? "prefix" : "suffix", jv_undefined_hint(r, "startswith/endswith need an argument"));
    size_t lo, hi;
    char_range(r, s.s, jarg(a, 1, NULL, jv_none()), jarg(a, 2, NULL, jv_none()), &lo, &hi);
    if (hi < lo) return jv_bool(false);
    JList single = {.n = 1, .items = &want};
    JList *options = want.type == JT_TUPLE ? want.l : &single;
    for (size_t i = 0; i < options->n; i++) {
        const JStr *w = jinja_need_str(r, options->items[i], prefix ? "startswith arg" : "endswith arg");
        if (w->len <= hi - lo && memcmp(prefix ? s.s->s + lo : s.s->s + hi - w->len, w->s, w->len) == 0) return jv_bool(true);
    }
    return jv_bool(false);
}
static JValue m_startswith(JRender *r, JValue s, JArgs *a) { return affix(r, s, a, true); }
static JValue m_endswith(JRender *r, JValue s, JArgs *a) { return affix(r, s, a, false); }

static JValue m_replace(JRender *r, JValue s, JArgs *a) {
    return py_replace(r, s, jarg(a, 0, "old", jv_none()), jarg(a, 1, "new", jv_none()), jv_as_int(r, jarg(a, 2, "count", jv_int(-1)), "count"));
}

static JValue do_find(JRender *r, JValue s, JArgs *a, bool right, bool count) {
    const JStr *sub = jinja_need_str(r, jarg(a, 0, "sub", jv_none()), "the substring");
    if (count) {
        int64_t n = 0;
        if (!sub->len) return jv_int((int64_t)jinja_utf8_count(s.s->s, s.s->len) + 1);
        for (const char *p = s.s->s; (p = find_bytes(p, s.s->len - (size_t)(p - s.s->s), sub->s, sub->len)); p += sub->len) n++;
        return jv_int(n);
    }
    const char *hit = right ? rfind_bytes(s.s->s, s.s->len, sub->s, sub->len) : find_bytes(s.s->s, s.s->len, sub->s, sub->len);
    return jv_int(hit ? (int64_t)jinja_utf8_count(s.s->s, (size_t)(hit - s.s->s)) : -1);
}
static JValue m_find(JRender *r, JValue s, JArgs *a) { return do_find(r, s, a, false, false); }
static JValue m_rfind(JRender *r, JValue s, JArgs *a) { return do_find(r, s, a, true, false); }
static JValue must_find(JRender *r, JValue at) {
    if (at.i < 0) jinja_fail(r, "substring not found");
    return at;
}
static JValue m_index(JRender *r, JValue s, JArgs *a) { return must_find(r, do_find(r, s, a, false, false)); }
static JValue m_rindex(JRender *r, JValue s, JArgs *a) { return must_find(r, do_find(r, s, a, true, false)); }
static JValue m_swapcase(JRender *r, JValue s, JArgs *a) { (void)a; return map_whole(r, s, WHOLE_SWAPCASE); }

/* center, ljust, rjust (fill: one character) and zfill */
static JValue pad(JRender *r, JValue s, JArgs *a, char how) {
    int64_t width = jv_as_int(r, jarg(a, 0, "width", jv_none()), "width");
    const JStr *fill = how == 'z' ? NULL : jinja_need_str(r, jarg(a, 1, "fillchar", jv_cstr(r, " ")), "the fill character");
    if (fill && jinja_utf8_count(fill->s, fill->len) != 1) jinja_fail(r, "The fill character must be exactly one character long");
    int64_t n = (int64_t)jinja_utf8_count(s.s->s, s.s->len), extra = width - n;
    if (extra <= 0) return s;
    if (width > (int64_t)r->limits->max_output) jinja_fail(r, "a padded string is over the output limit");
    int64_t left = how == 'l' ? 0 : how == 'c' ? extra / 2 + (extra & width & 1) : extra;
    JBuf b = {0};
    size_t body = 0;
    if (how == 'z' && s.s->len && (s.s->s[0] == '+' || s.s->s[0] == '-')) { /* the sign stays first */
        jbuf_put(r, &b, s.s->s, 1);
        body = 1;
    }
    for (int64_t i = 0; i < left; i++) jbuf_put(r, &b, fill ? fill->s : "0", fill ? fill->len : 1);
    jbuf_put(r, &b, s.s->s + body, s.s->len - body);
    for (int64_t i = 0; i < extra - left; i++) jbuf_put(r, &b, fill->s, fill->len);
    return jbuf_value(r, &b);
}
static JValue m_center(JRender *r, JValue s, JArgs *a) { return pad(r, s, a, 'c'); }
static JValue m_ljust(JRender *r, JValue s, JArgs *a) { return pad(r, s, a, 'l'); }
static JValue m_rjust(JRender *r, JValue s, JArgs *a) { return pad(r, s, a, 'r'); }
static JValue m_zfill(JRender *r, JValue s, JArgs *a) { return pad(r, s, a, 'z'); }

static JValue partition(JRender *r, JValue s, JArgs *a, bool right) {
    const JStr *sep = jinja_need_str(r, jarg(a, 0, "sep", jv_none()), "the separator");
    if (!sep->len) jinja_fail(r, "empty separator");
    const char *hit = right ? rfind_bytes(s.s->s, s.s->len, sep->s, sep->len) : find_bytes(s.s->s, s.s->len, sep->s, sep->len);
    JValue out = jv_list(r, 3), empty = jv_cstr(r, "");
    out.type = JT_TUPLE;
    if (!hit) {
        jv_list_push(r, out.l, right ? empty : s);
        jv_list_push(r, out.l, empty);
        jv_list_push(r, out.l, right ? s : empty);
        return out;
    }
    size_t at = (size_t)(hit - s.s->s);
    jv_list_push(r, out.l, jv_str(r, s.s->s, at));
    jv_list_push(r, out.l, jv_str(r, sep->s, sep->len));
    jv_list_push(r, out.l, jv_str(r, hit + sep->len, s.s->len - at - sep->len));
    return out;
}
static JValue m_partition(JRender *r, JValue s, JArgs *a) { return partition(r, s, a, false); }
static JValue m_rpartition(JRender *r, JValue s, JArgs *a) { return partition(r, s, a, true); }
static JValue m_count(JRender *r, JValue s, JArgs *a) { return do_find(r, s, a, false, true); }

static JValue m_join(JRender *r, JValue s, JArgs *a) {
    JList *items = jv_iterate(r, jarg(a, 0, "iterable", jv_list(r, 0)));
    JBuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (items->items[i].type != JT_STR) jinja_fail(r, "sequence item %zu: expected str instance, %s found", i, jv_type_name(items->items[i]));
        if (i) jbuf_put(r, &b, s.s->s, s.s->len);
        jbuf_put(r, &b, items->items[i].s->s, items->items[i].s->len);
    }
    return jbuf_value(r, &b);
}

static JValue classify(JRender *r, JValue s, int kind) {
    if (!s.s->len) return jv_bool(false);
    bool any_cased = false;
    for (size_t i = 0; i < s.s->len;) {
        uint32_t cp = jinja_utf8_next(s.s->s, s.s->len, &i);
        utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
        bool letter = c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
        bool digit = c == UTF8PROC_CATEGORY_ND;
        switch (kind) {
        case 0: if (!digit) return jv_bool(false); break;                 /* isdigit */
        case 1: if (!letter) return jv_bool(false); break;                /* isalpha */
        case 2: if (!letter && !digit) return jv_bool(false); break;      /* isalnum */
        case 3: if (!py_isspace_cp(cp)) return jv_bool(false); break;    /* isspace */
        case 4: if (c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT) return jv_bool(false); any_cased |= c == UTF8PROC_CATEGORY_LU; break;
        case 5: if (c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT) return jv_bool(false); any_cased |= c == UTF8PROC_CATEGORY_LL; break;
        }
    }
    (void)r;
    return jv_bool(kind < 4 || any_cased);
}
static JValue m_isdigit(JRender *r, JValue s, JArgs *a) { (void)a; return classify(r, s, 0); }
static JValue m_isalpha(JRender *r, JValue s, JArgs *a) { (void)a; return classify(r, s, 1); }
static JValue m_isalnum(JRender *r, JValue s, JArgs *a) { (void)a; return classify(r, s, 2); }
static JValue m_isspace(JRender *r, JValue s, JArgs *a) { (void)a; return classify(r, s, 3); }
static JValue m_isupper(JRender *r, JValue s, JArgs *a) { (void)a; return classify(r, s, 4); }
static JValue m_islower(JRender *r, JValue s, JArgs *a) { (void)a; return classify(r, s, 5); }

static JValue remove_affix(JRender *r, JValue s, JArgs *a, bool prefix) {
    const JStr *w = jinja_need_str(r, jarg(a, 0, prefix ? "prefix" : "suffix", jv_none()), "the argument");
    if (w->len > s.s->len || memcmp(prefix ? s.s->s : s.s->s + s.s->len - w->len, w->s, w->len)) return s;
    return jv_str(r, prefix ? s.s->s + w->len : s.s->s, s.s->len - w->len);
}
static JValue m_removeprefix(JRender *r, JValue s, JArgs *a) { return remove_affix(r, s, a, true); }
static JValue m_removesuffix(JRender *r, JValue s, JArgs *a) { return remove_affix(r, s, a, false); }

typedef struct StrMethod {
    const char *name;
    JBuiltin fn;
} StrMethod;

static const StrMethod STR_METHODS[] = {
    {"upper", m_upper},         {"lower", m_lower},           {"title", m_title},
    {"capitalize", m_capitalize}, {"strip", m_strip},         {"lstrip", m_lstrip},
    {"rstrip", m_rstrip},       {"split", m_split},           {"rsplit", m_rsplit},
    {"splitlines", m_splitlines}, {"startswith", m_startswith}, {"endswith", m_endswith},
    {"replace", m_replace},     {"find", m_find},             {"rfind", m_rfind},
    {"count", m_count},         {"join", m_join},             {"format", py_str_format},
    {"isdigit", m_isdigit},     {"isalpha", m_isalpha},       {"isalnum", m_isalnum},
    {"isspace", m_isspace},     {"isupper", m_isupper},       {"islower", m_islower},
    {"removeprefix", m_removeprefix}, {"removesuffix", m_removesuffix}, {"index", m_index},
    {"rindex", m_rindex},       {"swapcase", m_swapcase},     {"center", m_center},
    {"ljust", m_ljust},         {"rjust", m_rjust},           {"zfill", m_zfill},
    {"partition", m_partition}, {"rpartition", m_rpartition},
};

JValue jinja_str_method(JRender *r, JValue s, const char *name) {
    for (size_t i = 0; i < sizeof STR_METHODS / sizeof *STR_METHODS; i++)
        if (!strcmp(STR_METHODS[i].name, name)) return jv_func(r, STR_METHODS[i].name, STR_METHODS[i].fn, s);
    return jv_undefined(r, name, "str object");
}
