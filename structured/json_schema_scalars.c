/*
 * json_schema_scalars.c - the texts of JSON scalars for json_schema.c (see
 * json_schema_scalars.h): numbers between bounds, JSON's lexical rules,
 * string formats, and object keys outside a list. Everything here is about
 * characters and digits; json_schema.c and json_schema_flatten.c are about
 * schemas.
 *
 * Bounds are handled as decimal digit strings, never as doubles, so a bound
 * of any size (up to the 309 integer digits of the largest double) gives an
 * exact grammar: a range of integers of one length is split at the first
 * digit where its ends differ (the classic digit-range construction), and a
 * fraction is compared with a bound's fraction digit by digit. A real bound
 * is read as its shortest text that reads back as the same double (0.1 is
 * "0.1"), so an inclusive bound is exact for any validator that parses
 * numbers into doubles; an exclusive one can differ only for a text with
 * more than 17 significant digits that rounds onto the bound itself.
 */
#include "json_schema_scalars.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A double has at most 309 integer digits and 324 fraction digits (shortest
 * form of the smallest subnormal); one more for a carry. */
#define MAX_DIGITS 400

/* A decimal value: sign, integer digits without leading zeros ("0" for
 * zero) and fraction digits without trailing zeros ("" when integral). */
typedef struct Decimal {
    bool negative;
    char int_digits[MAX_DIGITS + 2];
    char frac_digits[MAX_DIGITS + 2];
} Decimal;

/* ---- nothing-aware combinators --------------------------------------------- */

GExpr js_seq(Grammar *g, const GExpr *items, int n) {
    bool nothing = false;
    for (int i = 0; i < n; i++) {
        if (items[i] == G_ERROR) return G_ERROR;
        if (items[i] == JS_NOTHING) nothing = true;
    }
    return nothing ? JS_NOTHING : g_seq(g, items, n);
}

GExpr js_seq2(Grammar *g, GExpr a, GExpr b) {
    GExpr items[2] = {a, b};
    return js_seq(g, items, 2);
}

GExpr js_alt(Grammar *g, GExpr *items, int n) {
    int kept = 0;
    for (int i = 0; i < n; i++) {
        if (items[i] == G_ERROR) return G_ERROR;
        if (items[i] != JS_NOTHING) items[kept++] = items[i];
    }
    if (kept == 0) return JS_NOTHING;
    if (kept == 1) return items[0];
    return g_alt(g, items, kept);
}

GExpr js_alt2(Grammar *g, GExpr a, GExpr b) {
    GExpr items[2] = {a, b};
    return js_alt(g, items, 2);
}

/* ---- decimals ----------------------------------------------------------------- */

static void strip_leading_zeros(char *digits) {
    size_t skip = 0, len = strlen(digits);
    while (skip + 1 < len && digits[skip] == '0') skip++;
    memmove(digits, digits + skip, len - skip + 1);
}

static void strip_trailing_zeros(char *digits) {
    size_t len = strlen(digits);
    while (len > 0 && digits[len - 1] == '0') digits[--len] = '\0';
}

static bool decimal_is_zero(const Decimal *d) {
    return strcmp(d->int_digits, "0") == 0 && d->frac_digits[0] == '\0';
}

/* The shortest "%.*e" text of x that reads back as x, spread into digits. */
static void decimal_from_real(double x, Decimal *out) {
    char text[64];
    for (int precision = 0; precision < 17; precision++) {
        snprintf(text, sizeof text, "%.*e", precision, x);
        if (strtod(text, NULL) == x) break;
    }
    /* Digits of the mantissa, whatever the locale's decimal point, then the exponent. */
    char mantissa[32];
    size_t num_digits = 0;
    const char *p = text;
    out->negative = *p == '-';
    for (; *p && *p != 'e' && *p != 'E'; p++)
        if (*p >= '0' && *p <= '9' && num_digits + 1 < sizeof mantissa) mantissa[num_digits++] = *p;
    mantissa[num_digits] = '\0';
    long exponent = *p ? strtol(p + 1, NULL, 10) : 0;
    /* The point sits after the first mantissa digit, moved by the exponent;
     * |exponent| <= 324 keeps every piece below within MAX_DIGITS. */
    long point = 1 + exponent;
    if (point <= 0) {
        strcpy(out->int_digits, "0");
        size_t zeros = (size_t)-point;
        memset(out->frac_digits, '0', zeros);
        memcpy(out->frac_digits + zeros, mantissa, num_digits + 1);
    } else if ((size_t)point >= num_digits) {
        memcpy(out->int_digits, mantissa, num_digits);
        memset(out->int_digits + num_digits, '0', (size_t)point - num_digits);
        out->int_digits[point] = '\0';
        out->frac_digits[0] = '\0';
    } else {
        memcpy(out->int_digits, mantissa, (size_t)point);
        out->int_digits[point] = '\0';
        strcpy(out->frac_digits, mantissa + point);
    }
    strip_leading_zeros(out->int_digits);
    strip_trailing_zeros(out->frac_digits);
    if (decimal_is_zero(out)) out->negative = false;
}

static void decimal_from_json(const json_t *v, Decimal *out) {
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        /* The magnitude as unsigned, so that the most negative value has one. */
        unsigned long long magnitude = n < 0 ? 0ull - (unsigned long long)n : (unsigned long long)n;
        out->negative = n < 0;
        snprintf(out->int_digits, sizeof out->int_digits, "%llu", magnitude);
        out->frac_digits[0] = '\0';
    } else {
        decimal_from_real(json_number_value(v), out);
    }
}

/* Compares magnitudes of digit strings without leading/trailing zeros. */
static int compare_magnitudes(const Decimal *a, const Decimal *b) {
    size_t la = strlen(a->int_digits), lb = strlen(b->int_digits);
    if (la != lb) return la < lb ? -1 : 1;
    int c = strcmp(a->int_digits, b->int_digits);
    if (c) return c < 0 ? -1 : 1;
    c = strcmp(a->frac_digits, b->frac_digits); /* a shorter fraction is a prefix: smaller */
    return c < 0 ? -1 : c > 0;
}

static int compare_decimals(const Decimal *a, const Decimal *b) {
    if (a->negative != b->negative) return a->negative ? -1 : 1;
    int c = compare_magnitudes(a, b);
    return a->negative ? -c : c;
}

int js_number_compare(const json_t *a, const json_t *b) {
    Decimal da, db;
    decimal_from_json(a, &da);
    decimal_from_json(b, &db);
    return compare_decimals(&da, &db);
}

bool js_number_is_integral(const json_t *v) {
    Decimal d;
    decimal_from_json(v, &d);
    return d.frac_digits[0] == '\0';
}

/* digits + 1, in place (the buffer has room for one more digit). */
static void magnitude_increment(char *digits) {
    size_t len = strlen(digits);
    size_t i = len;
    while (i > 0 && digits[i - 1] == '9') digits[--i] = '0';
    if (i > 0) {
        digits[i - 1]++;
    } else {
        memmove(digits + 1, digits, len + 1);
        digits[0] = '1';
    }
}

/* digits - 1, in place, for digits > 0. */
static void magnitude_decrement(char *digits) {
    size_t i = strlen(digits);
    while (i > 0 && digits[i - 1] == '0') digits[--i] = '9';
    if (i > 0) digits[i - 1]--;
    strip_leading_zeros(digits);
}

/* An integral decimal + 1 or - 1, keeping zero positive. */
static void integer_step(Decimal *d, int step) {
    bool away_from_zero = (step > 0) != d->negative;
    if (strcmp(d->int_digits, "0") == 0) {
        strcpy(d->int_digits, "1");
        d->negative = step < 0;
    } else if (away_from_zero) {
        magnitude_increment(d->int_digits);
    } else {
        magnitude_decrement(d->int_digits);
        if (strcmp(d->int_digits, "0") == 0) d->negative = false;
    }
}

/* The smallest integer >= d (up) or the largest <= d (down). */
static void integer_round(Decimal *d, bool up) {
    if (d->frac_digits[0] == '\0') return;
    d->frac_digits[0] = '\0';
    /* Dropping the fraction moved d toward zero: right for up when negative,
     * for down when positive; otherwise one more step away from zero. */
    if (up != d->negative) {
        magnitude_increment(d->int_digits);
    } else if (strcmp(d->int_digits, "0") == 0) {
        d->negative = false;
    }
}

/* ---- integers ------------------------------------------------------------------ */

static GExpr digits_between(Grammar *g, char lo, char hi) {
    return g_byte_range(g, (uint8_t)lo, (uint8_t)hi);
}

static GExpr any_digits(Grammar *g, int count) {
    if (count == 0) return g_empty(g);
    return g_repeat(g, digits_between(g, '0', '9'), count, count);
}

/* Digit strings of the length of lo and hi (lo <= hi) between them: after a
 * common prefix, lo's digit then anything above lo's rest, the digits
 * between, and hi's digit then anything below hi's rest. Position pos, with
 * tight_lo / tight_hi telling whether the digits so far equal lo's / hi's. */
static GExpr fixed_length_range(Grammar *g, const char *lo, const char *hi, int len, int pos,
                                bool tight_lo, bool tight_hi) {
    if (pos == len) return g_empty(g);
    if (!tight_lo && !tight_hi) return any_digits(g, len - pos);
    char l = tight_lo ? lo[pos] : '0', h = tight_hi ? hi[pos] : '9';
    if (l > h) return JS_NOTHING;
    if (l == h)
        return js_seq2(g, digits_between(g, l, l),
                       fixed_length_range(g, lo, hi, len, pos + 1, tight_lo, tight_hi));
    GExpr alts[3];
    alts[0] = js_seq2(g, digits_between(g, l, l), fixed_length_range(g, lo, hi, len, pos + 1, tight_lo, false));
    alts[1] = h - l >= 2 ? g_seq2(g, digits_between(g, (char)(l + 1), (char)(h - 1)), any_digits(g, len - pos - 1))
                         : JS_NOTHING;
    alts[2] = js_seq2(g, digits_between(g, h, h), fixed_length_range(g, lo, hi, len, pos + 1, false, tight_hi));
    return js_alt(g, alts, 3);
}

/* The decimal texts of the integers in [lo, hi] (hi NULL: no upper bound),
 * lo >= 0, digit strings without leading zeros. */
static GExpr natural_range(Grammar *g, const char *lo, const char *hi) {
    int lo_len = (int)strlen(lo), hi_len = hi ? (int)strlen(hi) : 0;
    if (hi && (lo_len > hi_len || (lo_len == hi_len && strcmp(lo, hi) > 0))) return JS_NOTHING;
    if (hi && lo_len == hi_len) return fixed_length_range(g, lo, hi, lo_len, 0, true, true);

    char nines[MAX_DIGITS + 2], power_of_ten[MAX_DIGITS + 2];
    memset(nines, '9', (size_t)lo_len);
    nines[lo_len] = '\0';
    GExpr alts[3];
    alts[0] = fixed_length_range(g, lo, nines, lo_len, 0, true, true);
    GExpr leading = digits_between(g, '1', '9');
    if (!hi) { /* every longer length */
        alts[1] = g_seq2(g, leading, g_repeat(g, digits_between(g, '0', '9'), lo_len, G_UNBOUNDED));
        return js_alt(g, alts, 2);
    }
    alts[1] = hi_len - lo_len >= 2 /* whole lengths strictly between */
                  ? g_seq2(g, leading, g_repeat(g, digits_between(g, '0', '9'), lo_len, hi_len - 2))
                  : JS_NOTHING;
    power_of_ten[0] = '1';
    memset(power_of_ten + 1, '0', (size_t)hi_len - 1);
    power_of_ten[hi_len] = '\0';
    alts[2] = fixed_length_range(g, power_of_ten, hi, hi_len, 0, true, true);
    return js_alt(g, alts, 3);
}

/* ---- fractions ------------------------------------------------------------------ */

/* Bounds on the value 0.DIGITS of a fraction: each side is absent or a digit
 * string without trailing zeros ("" for 0), inclusive or not. */
typedef struct FractionBounds {
    const char *lo, *hi; /* NULL: no bound on that side */
    bool lo_inclusive, hi_inclusive;
} FractionBounds;

static char digit_at(const char *digits, int pos) {
    return pos < (int)strlen(digits) ? digits[pos] : '0';
}

/* Whether the fraction may stop at pos, the digits so far equal to lo's
 * (tight_lo) / hi's (tight_hi) where told. */
static bool fraction_may_end(const FractionBounds *b, int pos, bool tight_lo, bool tight_hi) {
    if (tight_lo) { /* equal so far: below lo while lo has digits left, else equal */
        if (pos < (int)strlen(b->lo) || !b->lo_inclusive) return false;
    }
    if (tight_hi && pos >= (int)strlen(b->hi) && !b->hi_inclusive) return false;
    return true;
}

static GExpr fraction_digits(Grammar *g, const FractionBounds *b, int pos, bool tight_lo, bool tight_hi);

/* The digits from pos on, possibly none. */
static GExpr fraction_tail(Grammar *g, const FractionBounds *b, int pos, bool tight_lo, bool tight_hi) {
    GExpr more = fraction_digits(g, b, pos, tight_lo, tight_hi);
    return fraction_may_end(b, pos, tight_lo, tight_hi) ? js_alt2(g, g_empty(g), more) : more;
}

/* One or more digits from pos on. */
static GExpr fraction_digits(Grammar *g, const FractionBounds *b, int pos, bool tight_lo, bool tight_hi) {
    GExpr digit = digits_between(g, '0', '9');
    bool lo_done = !tight_lo || pos >= (int)strlen(b->lo);
    bool hi_done = !tight_hi || pos >= (int)strlen(b->hi);
    if (lo_done && hi_done) { /* what is left of a tight bound is all zeros */
        if (tight_hi) /* any nonzero digit passes hi; all zeros equal it (and lo, if tight) */
            return b->hi_inclusive && (!tight_lo || b->lo_inclusive) ? g_repeat(g, digits_between(g, '0', '0'), 1, G_UNBOUNDED)
                                                                     : JS_NOTHING;
        if (tight_lo && !b->lo_inclusive) /* past lo only with a nonzero digit */
            return g_seq(g, (GExpr[]){g_repeat(g, digits_between(g, '0', '0'), 0, G_UNBOUNDED),
                                      digits_between(g, '1', '9'), g_repeat(g, digit, 0, G_UNBOUNDED)},
                         3);
        return g_repeat(g, digit, 1, G_UNBOUNDED);
    }
    char l = tight_lo ? digit_at(b->lo, pos) : '0', h = tight_hi ? digit_at(b->hi, pos) : '9';
    if (l > h) return JS_NOTHING;
    if (l == h)
        return js_seq2(g, digits_between(g, l, l), fraction_tail(g, b, pos + 1, tight_lo, tight_hi));
    GExpr alts[3];
    alts[0] = js_seq2(g, digits_between(g, l, l), fraction_tail(g, b, pos + 1, tight_lo, false));
    alts[1] = h - l >= 2 ? g_seq2(g, digits_between(g, (char)(l + 1), (char)(h - 1)), g_repeat(g, digit, 0, G_UNBOUNDED))
                         : JS_NOTHING;
    alts[2] = js_seq2(g, digits_between(g, h, h), fraction_tail(g, b, pos + 1, false, tight_hi));
    return js_alt(g, alts, 3);
}

/* "" or "." and digits, whose value 0.DIGITS is within b. */
static GExpr fraction_part(Grammar *g, const FractionBounds *b) {
    bool tight_lo = b->lo != NULL, tight_hi = b->hi != NULL;
    GExpr with_point = js_seq2(g, g_str(g, "."), fraction_digits(g, b, 0, tight_lo, tight_hi));
    return fraction_may_end(b, 0, tight_lo, tight_hi) ? js_alt2(g, g_empty(g), with_point) : with_point;
}

static GExpr any_fraction_part(Grammar *g) {
    return g_optional(g, g_seq2(g, g_str(g, "."), g_repeat(g, digits_between(g, '0', '9'), 1, G_UNBOUNDED)));
}

/* Texts without sign of the numbers in [lo, hi] (the inclusive flags say
 * whether the ends belong), lo >= 0 always given, hi NULL for no bound. An
 * integer part strictly between the ends takes any fraction; an integer
 * part equal to an end has its fraction compared with that end's. */
static GExpr nonnegative_number_range(Grammar *g, const Decimal *lo, bool lo_inclusive, const Decimal *hi,
                                      bool hi_inclusive) {
    int int_order = 0; /* lo's integer part against hi's */
    if (hi) {
        size_t ll = strlen(lo->int_digits), hl = strlen(hi->int_digits);
        int_order = ll != hl ? (ll < hl ? -1 : 1) : strcmp(lo->int_digits, hi->int_digits);
        if (int_order > 0) return JS_NOTHING;
    }
    FractionBounds at_lo = {.lo = lo->frac_digits, .lo_inclusive = lo_inclusive};
    if (hi && int_order == 0) {
        at_lo.hi = hi->frac_digits;
        at_lo.hi_inclusive = hi_inclusive;
    }
    GExpr alts[3];
    alts[0] = js_seq2(g, g_str(g, lo->int_digits), fraction_part(g, &at_lo));
    alts[1] = alts[2] = JS_NOTHING;

    char above_lo[MAX_DIGITS + 2];
    strcpy(above_lo, lo->int_digits);
    magnitude_increment(above_lo);
    if (!hi) {
        alts[1] = js_seq2(g, natural_range(g, above_lo, NULL), any_fraction_part(g));
    } else if (int_order < 0) {
        char below_hi[MAX_DIGITS + 2];
        strcpy(below_hi, hi->int_digits);
        magnitude_decrement(below_hi); /* hi > lo >= 0, so hi >= 1 */
        alts[1] = js_seq2(g, natural_range(g, above_lo, below_hi), any_fraction_part(g));
        FractionBounds at_hi = {.hi = hi->frac_digits, .hi_inclusive = hi_inclusive};
        alts[2] = js_seq2(g, g_str(g, hi->int_digits), fraction_part(g, &at_hi));
    }
    return js_alt(g, alts, 3);
}

/* ---- signed ranges ----------------------------------------------------------------- */

static GExpr integer_range(Grammar *g, const Decimal *lower, const Decimal *upper) {
    GExpr parts[2] = {JS_NOTHING, JS_NOTHING};
    if (lower && upper && compare_decimals(lower, upper) > 0) return JS_NOTHING;
    if (!upper || !upper->negative) /* 0 and up */
        parts[0] = natural_range(g, lower && !lower->negative ? lower->int_digits : "0",
                                 upper ? upper->int_digits : NULL);
    if (!lower || lower->negative) /* "-" and the magnitudes, never -0 */
        parts[1] = js_seq2(g, g_str(g, "-"),
                           natural_range(g, upper && upper->negative ? upper->int_digits : "1",
                                         lower ? lower->int_digits : NULL));
    return js_alt(g, parts, 2);
}

static GExpr number_range(Grammar *g, const Decimal *lower, bool lower_exclusive, const Decimal *upper,
                          bool upper_exclusive) {
    static const Decimal zero = {.negative = false, .int_digits = "0", .frac_digits = ""};
    GExpr parts[2] = {JS_NOTHING, JS_NOTHING};
    bool upper_reaches_nonnegative =
        !upper || (!upper->negative && (!decimal_is_zero(upper) || !upper_exclusive));
    if (upper_reaches_nonnegative) {
        bool from_lower = lower && !lower->negative;
        parts[0] = nonnegative_number_range(g, from_lower ? lower : &zero, from_lower ? !lower_exclusive : true,
                                            upper, !upper_exclusive);
    }
    if (!lower || lower->negative) {
        /* -u with u > 0: u from |upper| (when upper < 0) or from just above 0, up to |lower|. */
        bool from_upper = upper && upper->negative;
        parts[1] = js_seq2(g, g_str(g, "-"),
                           nonnegative_number_range(g, from_upper ? upper : &zero,
                                                    from_upper ? !upper_exclusive : false, lower,
                                                    !lower_exclusive));
    }
    return js_alt(g, parts, 2);
}

GExpr js_number_range(Grammar *g, bool integer_only, JsBound lower, JsBound upper) {
    /* Two Decimals are large; they live on the heap so that deep schemas keep a small stack. */
    Decimal *bounds = malloc(2 * sizeof *bounds);
    if (!bounds) return grammar_fail(g, ERROR_INTERNAL, "json schema: out of memory");
    Decimal *lo = NULL, *hi = NULL;
    if (lower.value) decimal_from_json(lower.value, lo = &bounds[0]);
    if (upper.value) decimal_from_json(upper.value, hi = &bounds[1]);
    GExpr result;
    if (integer_only) {
        /* Integers above an exclusive bound start at floor + 1, below one end at ceil - 1. */
        if (lo) {
            integer_round(lo, !lower.exclusive);
            if (lower.exclusive) integer_step(lo, +1);
        }
        if (hi) {
            integer_round(hi, upper.exclusive);
            if (upper.exclusive) integer_step(hi, -1);
        }
        result = integer_range(g, lo, hi);
    } else {
        result = number_range(g, lo, lower.exclusive, hi, upper.exclusive);
    }
    free(bounds);
    return result;
}

/* ---- JSON's own syntax ---------------------------------------------------------------- */

/* One character of the ASCII ranges given as pairs: "09af" is [0-9a-f]. */
static GExpr ascii_class(Grammar *g, const char *pairs) {
    uint32_t ranges[16];
    int n = 0;
    for (; pairs[0] && pairs[1] && n < 8; pairs += 2, n++) {
        ranges[2 * n] = (uint8_t)pairs[0];
        ranges[2 * n + 1] = (uint8_t)pairs[1];
    }
    return g_codepoints(g, ranges, n, G_UTF8);
}

#define SEQ(g, ...) g_seq(g, (GExpr[]){__VA_ARGS__}, (int)(sizeof((GExpr[]){__VA_ARGS__}) / sizeof(GExpr)))
#define ALT(g, ...) g_alt(g, (GExpr[]){__VA_ARGS__}, (int)(sizeof((GExpr[]){__VA_ARGS__}) / sizeof(GExpr)))

static int new_rule(Grammar *g, const char *prefix, GExpr body) {
    if (body == G_ERROR) return -1;
    int rule = grammar_fresh_rule(g, prefix);
    if (rule < 0 || grammar_define(g, rule, body) < 0) return -1;
    return rule;
}

static GExpr hex_digits(Grammar *g, int count) { return g_repeat(g, ascii_class(g, "09afAF"), count, count); }

static const uint32_t NOT_RAW[] = {0x00, 0x1F, '"', '"', '\\', '\\'}; /* what a JSON string escapes */

/* What follows a backslash in a JSON string, as one rule: escapes are rare,
 * so a call there costs little, while raw characters stay inline - a call
 * per character would make every state of a string push and pop a frame,
 * which the token-mask precomputation (token_matcher.c) pays per byte, and
 * inlining the escapes too would multiply the states of bounded strings. */
static int escape_rule(Grammar *g, JsonRules *r) {
    if (r->character >= 0) return r->character;
    /* \u escapes name whole code points (a surrogate only in a pair), so that
     * one character is one match whichever way it is written and
     * min/maxLength count what a validator counts. */
    GExpr escaped = ALT(g, ascii_class(g, "\"\"\\\\//bbffnnrrtt"),
                        SEQ(g, g_str(g, "u"), ascii_class(g, "09acACefEF"), hex_digits(g, 3)),
                        SEQ(g, g_str(g, "u"), ascii_class(g, "ddDD"), ascii_class(g, "07"), hex_digits(g, 2)),
                        SEQ(g, g_str(g, "u"), ascii_class(g, "ddDD"), ascii_class(g, "89abAB"), hex_digits(g, 2),
                            g_str(g, "\\u"), ascii_class(g, "ddDD"), ascii_class(g, "cfCF"), hex_digits(g, 2)));
    return r->character = new_rule(g, "json-escape", escaped);
}

GExpr js_char_expr(Grammar *g, JsonRules *r) {
    int escape = escape_rule(g, r);
    if (escape < 0) return G_ERROR;
    return g_alt2(g, g_codepoints_not(g, NOT_RAW, 3, G_UTF8), g_seq2(g, g_str(g, "\\"), g_ref(g, escape)));
}

int js_string_rule(Grammar *g, JsonRules *r) {
    if (r->string >= 0) return r->string;
    GExpr body = SEQ(g, g_str(g, "\""), g_repeat(g, js_char_expr(g, r), 0, G_UNBOUNDED), g_str(g, "\""));
    return r->string = new_rule(g, "json-string", body);
}

GExpr js_unbounded_integer(Grammar *g) {
    return g_alt2(g, g_str(g, "0"),
                  SEQ(g, g_optional(g, g_str(g, "-")), ascii_class(g, "19"), g_repeat(g, ascii_class(g, "09"), 0, G_UNBOUNDED)));
}

int js_number_rule(Grammar *g, JsonRules *r) {
    if (r->number >= 0) return r->number;
    GExpr body = SEQ(g, g_optional(g, g_str(g, "-")),
                     g_alt2(g, g_str(g, "0"), g_seq2(g, ascii_class(g, "19"), g_repeat(g, ascii_class(g, "09"), 0, G_UNBOUNDED))),
                     g_optional(g, g_seq2(g, g_str(g, "."), g_repeat(g, ascii_class(g, "09"), 1, G_UNBOUNDED))),
                     g_optional(g, SEQ(g, ascii_class(g, "eeEE"), g_optional(g, ascii_class(g, "++--")),
                                       g_repeat(g, ascii_class(g, "09"), 1, G_UNBOUNDED))));
    return r->number = new_rule(g, "json-number", body);
}

int js_value_rule(Grammar *g, JsonRules *r) {
    if (r->value >= 0) return r->value;
    int value = r->value = grammar_fresh_rule(g, "json-value"); /* named first: values nest */
    int string = js_string_rule(g, r), number = js_number_rule(g, r);
    if (value < 0 || string < 0 || number < 0) return -1;
    GExpr member = SEQ(g, g_ref(g, string), g_str(g, ":"), g_ref(g, value));
    GExpr next_member = SEQ(g, g_str(g, ","), g_ref(g, string), g_str(g, ":"), g_ref(g, value));
    int object = new_rule(g, "json-object",
                          SEQ(g, g_str(g, "{"), g_optional(g, g_seq2(g, member, g_repeat(g, next_member, 0, G_UNBOUNDED))),
                              g_str(g, "}")));
    GExpr items = g_seq2(g, g_ref(g, value), g_repeat(g, g_seq2(g, g_str(g, ","), g_ref(g, value)), 0, G_UNBOUNDED));
    int array = new_rule(g, "json-array", SEQ(g, g_str(g, "["), g_optional(g, items), g_str(g, "]")));
    if (object < 0 || array < 0) return -1;
    GExpr body = ALT(g, g_ref(g, object), g_ref(g, array), g_ref(g, string), g_ref(g, number), g_str(g, "true"),
                     g_str(g, "false"), g_str(g, "null"));
    return grammar_define(g, value, body) < 0 ? -1 : value;
}

/* ---- string formats ---------------------------------------------------------------------- */

/* RFC 3339 full-date, days checked against the month and the leap year. */
static GExpr date_grammar(Grammar *g) {
    GExpr day_up_to_28 = ALT(g, g_seq2(g, g_str(g, "0"), ascii_class(g, "19")),
                             g_seq2(g, g_str(g, "1"), ascii_class(g, "09")), g_seq2(g, g_str(g, "2"), ascii_class(g, "08")));
    GExpr days_30 = ALT(g, g_seq2(g, g_str(g, "0"), ascii_class(g, "19")), g_seq2(g, ascii_class(g, "12"), ascii_class(g, "09")),
                        g_str(g, "30"));
    GExpr days_31 = ALT(g, g_seq2(g, g_str(g, "0"), ascii_class(g, "19")), g_seq2(g, ascii_class(g, "12"), ascii_class(g, "09")),
                        g_seq2(g, g_str(g, "3"), ascii_class(g, "01")));
    GExpr month_31 = ALT(g, g_seq2(g, g_str(g, "0"), ascii_class(g, "1133557788")), g_seq2(g, g_str(g, "1"), ascii_class(g, "0022")));
    GExpr month_30 = g_alt2(g, g_seq2(g, g_str(g, "0"), ascii_class(g, "446699")), g_str(g, "11"));
    GExpr month_day = ALT(g, SEQ(g, month_31, g_str(g, "-"), days_31), SEQ(g, month_30, g_str(g, "-"), days_30),
                          g_seq2(g, g_str(g, "02-"), day_up_to_28));
    /* Leap years: the last two digits a nonzero multiple of 4, or 00 after a multiple of 4. */
    GExpr multiple_of_4 = g_alt2(g, g_seq2(g, ascii_class(g, "0022446688"), ascii_class(g, "004488")),
                                 g_seq2(g, ascii_class(g, "1133557799"), ascii_class(g, "2266")));
    GExpr nonzero_multiple_of_4 = ALT(g, g_seq2(g, ascii_class(g, "0022446688"), ascii_class(g, "4488")),
                                      g_seq2(g, ascii_class(g, "1133557799"), ascii_class(g, "2266")),
                                      g_seq2(g, ascii_class(g, "22446688"), g_str(g, "0")));
    GExpr leap_year = g_alt2(g, g_seq2(g, g_repeat(g, ascii_class(g, "09"), 2, 2), nonzero_multiple_of_4),
                             g_seq2(g, multiple_of_4, g_str(g, "00")));
    return g_alt2(g, SEQ(g, g_repeat(g, ascii_class(g, "09"), 4, 4), g_str(g, "-"), month_day),
                  g_seq2(g, leap_year, g_str(g, "-02-29")));
}

static GExpr hour_grammar(Grammar *g) {
    return g_alt2(g, g_seq2(g, ascii_class(g, "01"), ascii_class(g, "09")), g_seq2(g, g_str(g, "2"), ascii_class(g, "03")));
}

static GExpr minute_grammar(Grammar *g) { return g_seq2(g, ascii_class(g, "05"), ascii_class(g, "09")); }

/* RFC 3339 full-time: no leap second (validators disagree on it), at most
 * nanoseconds, and always an offset (a strict validator requires one). */
static GExpr time_grammar(Grammar *g) {
    GExpr fraction = g_seq2(g, g_str(g, "."), g_repeat(g, ascii_class(g, "09"), 1, 9));
    GExpr offset = g_alt2(g, g_str(g, "Z"), SEQ(g, ascii_class(g, "++--"), hour_grammar(g), g_str(g, ":"), minute_grammar(g)));
    return SEQ(g, hour_grammar(g), g_str(g, ":"), minute_grammar(g), g_str(g, ":"), minute_grammar(g),
               g_optional(g, fraction), offset);
}

/* Addresses that both of ajv-formats' email patterns accept: a dot-atom
 * before the @, and at least two host labels of up to 63 letters, digits
 * and inner hyphens after it. */
static GExpr email_grammar(Grammar *g) {
    static const uint32_t ATOM[] = {'a', 'z', 'A', 'Z', '0', '9', '!', '!', '#', '\'', '*', '+',
                                    '/', '/', '=', '=', '?', '?', '^', '`', '{', '~', '-', '-'};
    GExpr atoms[2], labels[2];
    for (int i = 0; i < 2; i++) {
        atoms[i] = g_repeat(g, g_codepoints(g, ATOM, 12, G_UTF8), 1, G_UNBOUNDED);
        labels[i] = g_seq2(g, ascii_class(g, "azAZ09"),
                           g_optional(g, g_seq2(g, g_repeat(g, ascii_class(g, "azAZ09--"), 0, 61), ascii_class(g, "azAZ09"))));
    }
    GExpr local = g_seq2(g, atoms[0], g_repeat(g, g_seq2(g, g_str(g, "."), atoms[1]), 0, G_UNBOUNDED));
    GExpr domain = g_seq2(g, labels[0], g_repeat(g, g_seq2(g, g_str(g, "."), labels[1]), 1, G_UNBOUNDED));
    return SEQ(g, local, g_str(g, "@"), domain);
}

GExpr js_format_grammar(Grammar *g, const char *format) {
    if (strcmp(format, "date") == 0) return date_grammar(g);
    if (strcmp(format, "time") == 0) return time_grammar(g);
    if (strcmp(format, "date-time") == 0) return SEQ(g, date_grammar(g), g_str(g, "T"), time_grammar(g));
    if (strcmp(format, "uuid") == 0)
        return SEQ(g, hex_digits(g, 8), g_str(g, "-"), hex_digits(g, 4), g_str(g, "-"), hex_digits(g, 4),
                   g_str(g, "-"), hex_digits(g, 4), g_str(g, "-"), hex_digits(g, 12));
    if (strcmp(format, "email") == 0) return email_grammar(g);
    return JS_NOTHING;
}

/* ---- keys but the listed ones ------------------------------------------------------------- */

/* Names as code points, in a trie. */
typedef struct NameTrie {
    uint32_t *chars; /* chars[i]: the character leading to node i (node 0 is the root) */
    int *first_child, *next_sibling;
    bool *is_name;
    int num_nodes, capacity;
} NameTrie;

static int trie_child(NameTrie *t, int node, uint32_t c) {
    for (int child = t->first_child[node]; child >= 0; child = t->next_sibling[child])
        if (t->chars[child] == c) return child;
    if (t->num_nodes == t->capacity) return -1; /* sized for every character of every name */
    int child = t->num_nodes++;
    t->chars[child] = c;
    t->first_child[child] = -1;
    t->next_sibling[child] = t->first_child[node];
    t->is_name[child] = false;
    t->first_child[node] = child;
    return child;
}

/* Decodes one UTF-8 character (jansson has checked the encoding). */
static uint32_t next_code_point(const unsigned char **p, const unsigned char *end) {
    uint32_t c = *(*p)++;
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    c &= more == 3 ? 0x07 : more == 2 ? 0x0F : more == 1 ? 0x1F : 0x7F;
    for (; more > 0 && *p < end; more--) c = (c << 6) | (*(*p)++ & 0x3F);
    return c;
}

/* The characters of a key that are not the rest of a name from node on;
 * once off every name, the rest of the key is the rule rest_rule. */
static GExpr key_not_in_trie(Grammar *g, const NameTrie *t, int node, int rest_rule) {
    int num_children = 0;
    for (int child = t->first_child[node]; child >= 0; child = t->next_sibling[child]) num_children++;
    /* On the heap: this recurses once per character of the longest name. */
    uint32_t *excluded = malloc((size_t)(num_children + 3) * 2 * sizeof *excluded);
    GExpr *alts = malloc((size_t)(num_children + 2) * sizeof *alts);
    if (!excluded || !alts) {
        free(excluded);
        free(alts);
        return grammar_fail(g, ERROR_INTERNAL, "json schema: out of memory");
    }
    memcpy(excluded, NOT_RAW, sizeof NOT_RAW);
    int num_excluded = 3, n = 0;
    for (int child = t->first_child[node]; child >= 0; child = t->next_sibling[child]) {
        uint32_t c = t->chars[child];
        excluded[2 * num_excluded] = excluded[2 * num_excluded + 1] = c;
        num_excluded++;
        if (c < 0x20 || c == '"' || c == '\\') continue; /* never written raw: nothing to exclude */
        alts[n++] = g_seq2(g, g_codepoints(g, (uint32_t[]){c, c}, 1, G_UTF8), key_not_in_trie(g, t, child, rest_rule));
    }
    alts[n++] = g_seq2(g, g_codepoints_not(g, excluded, num_excluded, G_UTF8), g_ref(g, rest_rule));
    if (!t->is_name[node]) alts[n++] = g_empty(g);
    GExpr e = g_alt(g, alts, n);
    free(excluded);
    free(alts);
    return e;
}

GExpr js_key_not_listed(Grammar *g, const char *const *names, const size_t *lengths, int num_names) {
    size_t total = 1;
    for (int i = 0; i < num_names; i++) total += lengths[i];
    NameTrie t = {.capacity = (int)total};
    t.chars = malloc(total * sizeof *t.chars);
    t.first_child = malloc(total * sizeof *t.first_child);
    t.next_sibling = malloc(total * sizeof *t.next_sibling);
    t.is_name = malloc(total * sizeof *t.is_name);
    GExpr key;
    if (t.chars && t.first_child && t.next_sibling && t.is_name) {
        t.num_nodes = 1;
        t.first_child[0] = -1;
        t.is_name[0] = false;
        for (int i = 0; i < num_names; i++) {
            const unsigned char *p = (const unsigned char *)names[i], *end = p + lengths[i];
            int node = 0;
            while (p < end && node >= 0) node = trie_child(&t, node, next_code_point(&p, end));
            if (node >= 0) t.is_name[node] = true;
        }
        /* One rule for "any raw characters": shared by every node, not copied into each. */
        int rest_rule = new_rule(g, "key-rest", g_repeat(g, g_codepoints_not(g, NOT_RAW, 3, G_UTF8), 0, G_UNBOUNDED));
        key = rest_rule < 0 ? G_ERROR : key_not_in_trie(g, &t, 0, rest_rule);
    } else {
        key = grammar_fail(g, ERROR_INTERNAL, "json schema: out of memory");
    }
    free(t.chars);
    free(t.first_child);
    free(t.next_sibling);
    free(t.is_name);
    return key;
}
