/*
 * workload.c — the workload model of the `attn` CLI: case defaults, JSON loading with errors that name the
 * key path (cJSON), the built-in registry, and the shared case runner (fill, time, oracle comparison on a
 * row subset). Attention itself is only ever called through <attn/attn.h>.
 */
#include "workload.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

/* ---------------------------------------------------------------------------------------------
 * The model
 * --------------------------------------------------------------------------------------------- */
void attn_wl_case_init(attn_wl_case *c, const char *name) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name ? name : "");
    c->layout = ATTN_WL_LAYOUT_BSND;
    c->batch = 1;
    c->seq_q[0] = 1;
    c->seq_k[0] = 1;
    c->num_heads = 1;
    c->num_kv_heads = 1;
    c->head_size = 64;
    c->head_size_v = 64;
    c->dtype = ATTN_DTYPE_F32;
    c->kv_dtype = ATTN_DTYPE_F32;
    c->causal = ATTN_CAUSAL_NONE;
    c->window_left = -1;
    c->window_right = -1;
    c->seed = 1;
}

int attn_workload_add(attn_workload *wl, const attn_wl_case *c) {
    if (wl->num_cases >= ATTN_WL_MAX_CASES)
        return -1;
    attn_wl_case *n = (attn_wl_case *)realloc(wl->cases, (size_t)(wl->num_cases + 1) * sizeof *n);
    if (!n)
        return -1;
    wl->cases = n;
    wl->cases[wl->num_cases++] = *c;
    return 0;
}

void attn_workload_free(attn_workload *wl) {
    free(wl->cases);
    wl->cases = NULL;
    wl->num_cases = 0;
}

static int64_t attn_wl_seq_q(const attn_wl_case *c, int64_t b) {
    return c->layout == ATTN_WL_LAYOUT_VARLEN ? c->seq_q[b] : c->seq_q[0];
}

static int64_t attn_wl_seq_k(const attn_wl_case *c, int64_t b) {
    return c->layout == ATTN_WL_LAYOUT_VARLEN ? c->seq_k[b] : c->seq_k[0];
}

int64_t attn_wl_case_total_q(const attn_wl_case *c) {
    if (c->layout != ATTN_WL_LAYOUT_VARLEN)
        return c->batch * c->seq_q[0];
    int64_t t = 0;
    for (int64_t b = 0; b < c->batch; b++)
        t += c->seq_q[b];
    return t;
}

int64_t attn_wl_case_total_k(const attn_wl_case *c) {
    if (c->layout != ATTN_WL_LAYOUT_VARLEN)
        return c->batch * c->seq_k[0];
    int64_t t = 0;
    for (int64_t b = 0; b < c->batch; b++)
        t += c->seq_k[b];
    return t;
}

/* ---------------------------------------------------------------------------------------------
 * JSON
 * --------------------------------------------------------------------------------------------- */
#define ATTN_WL_MAX_DIM 16777216 /* any single count (sequence, batch) */
#define ATTN_WL_MAX_DEPTH 32     /* nesting of [ and { in a workload file (the schema needs 4) */

typedef struct attn_wl_parser {
    const char *where; /* file name for messages */
    char *err;
    size_t errsize;
} attn_wl_parser;

/* Per-case parse state: seq lists are resolved once the layout is known. */
typedef struct attn_wl_seqs {
    int q_set, k_set, q_list, k_list;        /* seq_q/seq_k given, and given as lists    */
    int batch_set;                           /* batch given (an error with varlen)         */
    int kv_heads_set, hsv_set, kv_dtype_set; /* given, else they follow num_heads/head_size/dtype */
    int64_t num_q, num_k;                    /* list lengths */
} attn_wl_seqs;

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
attn_wl_fail(attn_wl_parser *ps, const char *path, const char *fmt, ...) {
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (path && path[0])
        snprintf(ps->err, ps->errsize, "%s: %s: %s", ps->where, path, msg);
    else
        snprintf(ps->err, ps->errsize, "%s: %s", ps->where, msg);
    return -1;
}

static const char *attn_wl_type_name(const cJSON *v) {
    if (cJSON_IsNull(v))
        return "null";
    if (cJSON_IsBool(v))
        return "a boolean";
    if (cJSON_IsNumber(v))
        return "a number";
    if (cJSON_IsString(v))
        return "a string";
    if (cJSON_IsArray(v))
        return "an array";
    if (cJSON_IsObject(v))
        return "an object";
    return "an invalid value";
}

static int attn_wl_is_int(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) <= 9007199254740992.0;
}

static int attn_wl_get_int(attn_wl_parser *ps, const char *path, const cJSON *v, int64_t lo, int64_t hi, int64_t *out) {
    if (!attn_wl_is_int(v))
        return attn_wl_fail(ps, path, "expected an integer in %lld..%lld, got %s", (long long)lo, (long long)hi,
                            cJSON_IsNumber(v) ? "a non-integer number" : attn_wl_type_name(v));
    const double d = v->valuedouble;
    if (d < (double)lo || d > (double)hi)
        return attn_wl_fail(ps, path, "%.0f is outside %lld..%lld", d, (long long)lo, (long long)hi);
    *out = (int64_t)d;
    return 0;
}

static int attn_wl_get_bool(attn_wl_parser *ps, const char *path, const cJSON *v, int *out) {
    if (!cJSON_IsBool(v))
        return attn_wl_fail(ps, path, "expected true or false, got %s", attn_wl_type_name(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return 0;
}

static int attn_wl_get_float(attn_wl_parser *ps, const char *path, const cJSON *v, double lo, double hi, float *out) {
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return attn_wl_fail(ps, path, "expected a number, got %s", attn_wl_type_name(v));
    if (v->valuedouble < lo || v->valuedouble > hi)
        return attn_wl_fail(ps, path, "%g is outside %g..%g", v->valuedouble, lo, hi);
    *out = (float)v->valuedouble;
    return 0;
}

static int attn_wl_get_dtype(attn_wl_parser *ps, const char *path, const cJSON *v, attn_dtype *out) {
    if (!cJSON_IsString(v))
        return attn_wl_fail(ps, path, "expected \"f32\", \"f16\" or \"bf16\", got %s", attn_wl_type_name(v));
    static const struct {
        const char *name;
        attn_dtype dtype;
    } names[] = {{"f32", ATTN_DTYPE_F32},     {"float32", ATTN_DTYPE_F32}, {"f16", ATTN_DTYPE_F16},
                 {"float16", ATTN_DTYPE_F16}, {"bf16", ATTN_DTYPE_BF16},   {"bfloat16", ATTN_DTYPE_BF16}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(v->valuestring, names[i].name) == 0) {
            *out = names[i].dtype;
            return 0;
        }
    return attn_wl_fail(ps, path, "unknown dtype \"%s\" (expected \"f32\", \"f16\" or \"bf16\")", v->valuestring);
}

/* ASCII case-insensitive equality (layout names are case-insensitive: "BSND" = "bsnd"). */
static int attn_wl_ieq(const char *a, const char *b) {
    for (; *a && *b; a++, b++) {
        const char x = (*a >= 'A' && *a <= 'Z') ? (char)(*a - 'A' + 'a') : *a;
        const char y = (*b >= 'A' && *b <= 'Z') ? (char)(*b - 'A' + 'a') : *b;
        if (x != y)
            return 0;
    }
    return *a == *b;
}

/* A count (int) or, for varlen, a list of counts. */
static int attn_wl_get_seqs(attn_wl_parser *ps, const char *path, const cJSON *v, int64_t *dst, int *is_list,
                            int64_t *num) {
    if (cJSON_IsArray(v)) {
        const int n = cJSON_GetArraySize(v);
        if (n < 1 || n > ATTN_WL_MAX_SEQS)
            return attn_wl_fail(ps, path, "a list of 1..%d sequence lengths expected, got %d entries", ATTN_WL_MAX_SEQS,
                                n);
        int i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            char sub[160];
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
            if (attn_wl_get_int(ps, sub, e, 0, ATTN_WL_MAX_DIM, &dst[i]))
                return -1;
        }
        *is_list = 1;
        *num = n;
        return 0;
    }
    if (!attn_wl_is_int(v))
        return attn_wl_fail(ps, path, "expected an integer or a list of integers, got %s", attn_wl_type_name(v));
    *is_list = 0;
    *num = 1;
    return attn_wl_get_int(ps, path, v, 0, ATTN_WL_MAX_DIM, &dst[0]);
}

static const char *const attn_wl_case_keys[] = {
    "name",          "layout",      "batch", "seq_q",    "seq_k",  "num_heads", "num_kv_heads",
    "head_size",     "head_size_v", "dtype", "kv_dtype", "causal", "window",    "softcap",
    "softmax_scale", "alibi",       "sinks", "lse",      "seed",   "repeats",   NULL};

/* Applies the keys of object o (at path prefix) to c. */
/* NULL if s is valid UTF-8 without control characters (a name or description the CLI prints, also inside JSON
 * output), else what is wrong with it. */
static const char *attn_wl_text_problem(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        const unsigned char c = *u;
        if (c < 0x20 || c == 0x7F) return "contains a control character";
        const int n = c < 0x80                  ? 0
                      : (c >= 0xC2 && c <= 0xDF) ? 1
                      : (c >= 0xE0 && c <= 0xEF) ? 2
                      : (c >= 0xF0 && c <= 0xF4) ? 3
                                                 : -1;
        if (n < 0) return "is not valid UTF-8";
        unsigned char lo = 0x80, hi = 0xBF; /* the first continuation byte's range (no overlongs, surrogates) */
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        u++;
        for (int i = 0; i < n; i++, u++) {
            if (*u < (i == 0 ? lo : 0x80) || *u > (i == 0 ? hi : 0xBF)) return "is not valid UTF-8";
        }
    }
    return NULL;
}

static int attn_wl_apply(attn_wl_parser *ps, const char *prefix, const cJSON *o, attn_wl_case *c, attn_wl_seqs *sq) {
    for (const cJSON *v = o->child; v; v = v->next) {
        char path[160];
        const char *key = v->string ? v->string : "";
        snprintf(path, sizeof path, "%s.%s", prefix, key);
        int64_t x;
        if (strcmp(key, "name") == 0) {
            if (!cJSON_IsString(v))
                return attn_wl_fail(ps, path, "expected a string, got %s", attn_wl_type_name(v));
            if (strlen(v->valuestring) >= sizeof c->name)
                return attn_wl_fail(ps, path, "longer than %d characters", (int)sizeof c->name - 1);
            const char *bad = attn_wl_text_problem(v->valuestring);
            if (bad) return attn_wl_fail(ps, path, "%s", bad);
            snprintf(c->name, sizeof c->name, "%s", v->valuestring);
        } else if (strcmp(key, "layout") == 0) {
            if (!cJSON_IsString(v))
                return attn_wl_fail(ps, path, "expected \"BSND\", \"BNSD\" or \"varlen\", got %s",
                                    attn_wl_type_name(v));
            if (attn_wl_ieq(v->valuestring, "BSND"))
                c->layout = ATTN_WL_LAYOUT_BSND;
            else if (attn_wl_ieq(v->valuestring, "BNSD"))
                c->layout = ATTN_WL_LAYOUT_BNSD;
            else if (attn_wl_ieq(v->valuestring, "varlen"))
                c->layout = ATTN_WL_LAYOUT_VARLEN;
            else
                return attn_wl_fail(ps, path, "unknown layout \"%s\" (expected \"BSND\", \"BNSD\" or \"varlen\")",
                                    v->valuestring);
        } else if (strcmp(key, "batch") == 0) {
            if (attn_wl_get_int(ps, path, v, 0, 65536, &c->batch))
                return -1;
            sq->batch_set = 1;
        } else if (strcmp(key, "seq_q") == 0) {
            if (attn_wl_get_seqs(ps, path, v, c->seq_q, &sq->q_list, &sq->num_q))
                return -1;
            sq->q_set = 1;
        } else if (strcmp(key, "seq_k") == 0) {
            if (attn_wl_get_seqs(ps, path, v, c->seq_k, &sq->k_list, &sq->num_k))
                return -1;
            sq->k_set = 1;
        } else if (strcmp(key, "num_heads") == 0) {
            if (attn_wl_get_int(ps, path, v, 1, 4096, &c->num_heads))
                return -1;
        } else if (strcmp(key, "num_kv_heads") == 0) {
            if (attn_wl_get_int(ps, path, v, 1, 4096, &c->num_kv_heads))
                return -1;
            sq->kv_heads_set = 1;
        } else if (strcmp(key, "head_size") == 0) {
            if (attn_wl_get_int(ps, path, v, 1, 256, &c->head_size))
                return -1;
        } else if (strcmp(key, "head_size_v") == 0) {
            if (attn_wl_get_int(ps, path, v, 1, 256, &c->head_size_v))
                return -1;
            sq->hsv_set = 1;
        } else if (strcmp(key, "dtype") == 0) {
            if (attn_wl_get_dtype(ps, path, v, &c->dtype))
                return -1;
        } else if (strcmp(key, "kv_dtype") == 0) {
            if (attn_wl_get_dtype(ps, path, v, &c->kv_dtype))
                return -1;
            sq->kv_dtype_set = 1;
        } else if (strcmp(key, "causal") == 0) {
            if (cJSON_IsBool(v)) {
                c->causal = cJSON_IsTrue(v) ? ATTN_CAUSAL_BOTTOM_RIGHT : ATTN_CAUSAL_NONE;
            } else if (cJSON_IsString(v) && strcmp(v->valuestring, "none") == 0) {
                c->causal = ATTN_CAUSAL_NONE;
            } else if (cJSON_IsString(v) && strcmp(v->valuestring, "bottom_right") == 0) {
                c->causal = ATTN_CAUSAL_BOTTOM_RIGHT;
            } else if (cJSON_IsString(v) && strcmp(v->valuestring, "top_left") == 0) {
                c->causal = ATTN_CAUSAL_TOP_LEFT;
            } else {
                return attn_wl_fail(ps, path,
                                    "expected \"none\", \"bottom_right\", \"top_left\" or a boolean, got %s%s%s%s",
                                    cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? v->valuestring : "",
                                    cJSON_IsString(v) ? "\"" : "", cJSON_IsString(v) ? "" : attn_wl_type_name(v));
            }
        } else if (strcmp(key, "window") == 0) {
            if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
                return attn_wl_fail(ps, path, "expected an array [left, right] of 2 integers, got %s",
                                    cJSON_IsArray(v) ? "an array of another length" : attn_wl_type_name(v));
            char sub[176];
            snprintf(sub, sizeof sub, "%s[0]", path);
            if (attn_wl_get_int(ps, sub, cJSON_GetArrayItem(v, 0), -1, INT32_MAX, &x))
                return -1;
            c->window_left = (int32_t)x;
            snprintf(sub, sizeof sub, "%s[1]", path);
            if (attn_wl_get_int(ps, sub, cJSON_GetArrayItem(v, 1), -1, INT32_MAX, &x))
                return -1;
            c->window_right = (int32_t)x;
        } else if (strcmp(key, "softcap") == 0) {
            if (attn_wl_get_float(ps, path, v, 0.0, 1e30, &c->softcap))
                return -1;
        } else if (strcmp(key, "softmax_scale") == 0) {
            if (attn_wl_get_float(ps, path, v, 0.0, 1e30, &c->softmax_scale))
                return -1;
        } else if (strcmp(key, "alibi") == 0) {
            if (attn_wl_get_bool(ps, path, v, &c->alibi))
                return -1;
        } else if (strcmp(key, "sinks") == 0) {
            if (attn_wl_get_bool(ps, path, v, &c->sinks))
                return -1;
        } else if (strcmp(key, "lse") == 0) {
            if (attn_wl_get_bool(ps, path, v, &c->lse))
                return -1;
        } else if (strcmp(key, "seed") == 0) {
            if (attn_wl_get_int(ps, path, v, 0, INT64_C(9007199254740992), &x))
                return -1;
            c->seed = (uint64_t)x;
        } else if (strcmp(key, "repeats") == 0) {
            if (attn_wl_get_int(ps, path, v, 1, 4096, &x))
                return -1;
            c->repeats = (int32_t)x;
        } else {
            char known[400] = "";
            for (int i = 0; attn_wl_case_keys[i]; i++) {
                strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
                strncat(known, attn_wl_case_keys[i], sizeof known - strlen(known) - 1);
            }
            return attn_wl_fail(ps, path, "unknown key (known keys: %s)", known);
        }
    }
    return 0;
}

/* Cross-field checks of one finished case. */
static int attn_wl_finish_case(attn_wl_parser *ps, const char *path, attn_wl_case *c, const attn_wl_seqs *sq) {
    if (!sq->kv_heads_set)
        c->num_kv_heads = c->num_heads;
    if (!sq->hsv_set)
        c->head_size_v = c->head_size;
    if (!sq->kv_dtype_set)
        c->kv_dtype = c->dtype;
    if (c->layout == ATTN_WL_LAYOUT_VARLEN) {
        if (!sq->q_set)
            return attn_wl_fail(ps, path, "layout \"varlen\" needs seq_q as a list of lengths");
        if (!sq->q_list)
            return attn_wl_fail(ps, path,
                                "layout \"varlen\" needs seq_q as a list of lengths, got an integer (write [%lld] for "
                                "one sequence)",
                                (long long)c->seq_q[0]);
        if (sq->k_set && !sq->k_list)
            return attn_wl_fail(ps, path,
                                "layout \"varlen\" needs seq_k as a list of lengths, got an integer (write [%lld] for "
                                "one sequence)",
                                (long long)c->seq_k[0]);
        if (sq->batch_set)
            return attn_wl_fail(ps, path, "batch is not used with layout \"varlen\" (it is the length of seq_q)");
        const int64_t n = sq->num_q;
        if (!sq->k_set) {
            memcpy(c->seq_k, c->seq_q, sizeof c->seq_k);
        } else if (sq->num_k != n) {
            return attn_wl_fail(ps, path, "seq_k has %lld entries but seq_q has %lld", (long long)sq->num_k,
                                (long long)n);
        }
        c->batch = n;
        if (attn_wl_case_total_q(c) > INT32_MAX || attn_wl_case_total_k(c) > INT32_MAX)
            return attn_wl_fail(ps, path, "varlen totals of seq_q/seq_k must fit int32 (cu_seqlens)");
    } else {
        if (sq->q_list)
            return attn_wl_fail(ps, path, "seq_q is a list, which needs layout \"varlen\"");
        if (sq->k_list)
            return attn_wl_fail(ps, path, "seq_k is a list, which needs layout \"varlen\"");
        if (!sq->k_set)
            c->seq_k[0] = c->seq_q[0];
    }
    if (c->num_heads % c->num_kv_heads != 0)
        return attn_wl_fail(ps, path, "num_kv_heads=%lld does not divide num_heads=%lld", (long long)c->num_kv_heads,
                            (long long)c->num_heads);
    /* memory guard: q, k, v, out in their dtypes must stay below 8 GiB */
    const double bytes = (double)attn_wl_case_total_q(c) * (double)c->num_heads *
                             (double)(c->head_size + c->head_size_v) * (double)attn_dtype_size(c->dtype) +
                         (double)attn_wl_case_total_k(c) * (double)c->num_kv_heads *
                             (double)(c->head_size + c->head_size_v) * (double)attn_dtype_size(c->kv_dtype);
    if (bytes > 8.0 * 1073741824.0)
        return attn_wl_fail(ps, path, "the case needs %.1f GiB of q/k/v/out (limit 8 GiB)", bytes / 1073741824.0);
    return 0;
}

static void attn_wl_syntax_error(attn_wl_parser *ps, const char *text, const char *at) {
    int line = 1, col = 1;
    for (const char *p = text; at && p < at && *p; p++) {
        if (*p == '\n')
            line++, col = 1;
        else
            col++;
    }
    char near[24];
    size_t n = 0;
    for (const char *p = at; p && *p && n < 16 && *p != '\n'; p++)
        near[n++] = (*p >= 32 && *p < 127) ? *p : '?';
    near[n] = '\0';
    if (!at || !*at)
        snprintf(ps->err, ps->errsize, "%s: line %d, column %d: JSON syntax error: unexpected end of input", ps->where,
                 line, col);
    else
        snprintf(ps->err, ps->errsize, "%s: line %d, column %d: JSON syntax error near '%s'", ps->where, line, col,
                 near);
}

/* Rejects text nested deeper than ATTN_WL_MAX_DEPTH arrays/objects before cJSON sees it (cJSON would stop
 * at its own limit with a misleading "syntax error"). Strings are skipped. Returns 0 or −1 (message set). */
static int attn_wl_check_depth(attn_wl_parser *ps, const char *text) {
    int depth = 0, line = 1, col = 1, in_string = 0;
    for (const char *p = text; *p; p++, col++) {
        if (in_string) {
            if (*p == '\\' && p[1])
                p++, col++;
            else if (*p == '"')
                in_string = 0;
        } else if (*p == '"') {
            in_string = 1;
        } else if (*p == '[' || *p == '{') {
            if (++depth > ATTN_WL_MAX_DEPTH) {
                snprintf(ps->err, ps->errsize, "%s: line %d, column %d: nesting too deep (more than %d levels of [ or {)",
                         ps->where, line, col, ATTN_WL_MAX_DEPTH);
                return -1;
            }
        } else if (*p == ']' || *p == '}') {
            depth--;
        } else if (*p == '\n') {
            line++, col = 0;
        }
    }
    return 0;
}

/* Rejects an object holding the same key twice (cJSON keeps both; lookups would silently take one). */
static int attn_wl_check_duplicates(attn_wl_parser *ps, const cJSON *node, const char *path) {
    int i = 0;
    for (const cJSON *v = node->child; v; v = v->next, i++) {
        char sub[192];
        if (cJSON_IsObject(node)) {
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", v->string ? v->string : "");
            for (const cJSON *u = node->child; u != v; u = u->next)
                if (u->string && v->string && strcmp(u->string, v->string) == 0)
                    return attn_wl_fail(ps, sub, "duplicate key (each key may appear once per object)");
        } else {
            snprintf(sub, sizeof sub, "%s[%d]", path, i);
        }
        if ((cJSON_IsObject(v) || cJSON_IsArray(v)) && attn_wl_check_duplicates(ps, v, sub))
            return -1;
    }
    return 0;
}

int attn_workload_parse(const char *text, const char *where, attn_workload *wl, char *err, size_t errsize) {
    attn_wl_parser ps = {where ? where : "workload", err, errsize};
    memset(wl, 0, sizeof *wl);
    if (attn_wl_check_depth(&ps, text))
        return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        attn_wl_syntax_error(&ps, text, end ? end : cJSON_GetErrorPtr());
        return -1;
    }
    int rc = -1;
    if (attn_wl_check_duplicates(&ps, root, ""))
        goto done;
    const cJSON *defaults = NULL, *cases = NULL;
    if (!cJSON_IsObject(root)) {
        attn_wl_fail(&ps, "", "the top level must be an object with \"cases\", got %s", attn_wl_type_name(root));
        goto done;
    }
    snprintf(wl->name, sizeof wl->name, "%s", ps.where);
    for (const cJSON *v = root->child; v; v = v->next) {
        const char *key = v->string ? v->string : "";
        if (strcmp(key, "name") == 0 || strcmp(key, "description") == 0) {
            if (!cJSON_IsString(v)) {
                attn_wl_fail(&ps, key, "expected a string, got %s", attn_wl_type_name(v));
                goto done;
            }
            const char *bad = attn_wl_text_problem(v->valuestring);
            if (bad) {
                attn_wl_fail(&ps, key, "%s", bad);
                goto done;
            }
            if (key[0] == 'n')
                snprintf(wl->name, sizeof wl->name, "%s", v->valuestring);
            else
                snprintf(wl->description, sizeof wl->description, "%s", v->valuestring);
        } else if (strcmp(key, "defaults") == 0) {
            if (!cJSON_IsObject(v)) {
                attn_wl_fail(&ps, key, "expected an object of case keys, got %s", attn_wl_type_name(v));
                goto done;
            }
            defaults = v;
        } else if (strcmp(key, "cases") == 0) {
            if (!cJSON_IsArray(v)) {
                attn_wl_fail(&ps, key, "expected an array of case objects, got %s", attn_wl_type_name(v));
                goto done;
            }
            cases = v;
        } else {
            attn_wl_fail(&ps, key, "unknown key (known keys: name, description, defaults, cases)");
            goto done;
        }
    }
    if (!cases) {
        attn_wl_fail(&ps, "cases", "missing (an array of case objects is required)");
        goto done;
    }
    if (cJSON_GetArraySize(cases) < 1 || cJSON_GetArraySize(cases) > ATTN_WL_MAX_CASES) {
        attn_wl_fail(&ps, "cases", "expected 1..%d cases, got %d", ATTN_WL_MAX_CASES, cJSON_GetArraySize(cases));
        goto done;
    }
    int i = 0;
    for (const cJSON *co = cases->child; co; co = co->next, i++) {
        char path[64], name[64];
        snprintf(path, sizeof path, "cases[%d]", i);
        snprintf(name, sizeof name, "case%d", i);
        if (!cJSON_IsObject(co)) {
            attn_wl_fail(&ps, path, "expected an object, got %s", attn_wl_type_name(co));
            goto done;
        }
        attn_wl_case c;
        attn_wl_seqs sq;
        attn_wl_case_init(&c, name);
        memset(&sq, 0, sizeof sq);
        if (defaults && attn_wl_apply(&ps, "defaults", defaults, &c, &sq))
            goto done;
        if (attn_wl_apply(&ps, path, co, &c, &sq))
            goto done;
        if (attn_wl_finish_case(&ps, path, &c, &sq))
            goto done;
        if (attn_workload_add(wl, &c)) {
            attn_wl_fail(&ps, path, "out of memory");
            goto done;
        }
    }
    rc = 0;
done:
    cJSON_Delete(root);
    if (rc)
        attn_workload_free(wl);
    return rc;
}

int attn_workload_load_file(const char *path, attn_workload *wl, char *err, size_t errsize) {
    memset(wl, 0, sizeof *wl);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errsize, "cannot read '%s': %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, len = 0;
    char *buf = (char *)malloc(cap);
    while (buf) {
        if (len + 1 >= cap) {
            if (cap >= ((size_t)64 << 20)) {
                free(buf);
                fclose(f);
                snprintf(err, errsize, "%s: larger than 64 MiB", path);
                return -1;
            }
            char *nb = (char *)realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb, cap *= 2;
        }
        const size_t got = fread(buf + len, 1, cap - 1 - len, f);
        len += got;
        if (got == 0)
            break;
    }
    const int read_error = ferror(f);
    fclose(f);
    if (!buf || read_error) {
        free(buf);
        snprintf(err, errsize, "cannot read '%s': %s", path, buf ? "read error" : "out of memory");
        return -1;
    }
    buf[len] = '\0';
    if (strlen(buf) != len) {
        free(buf);
        snprintf(err, errsize, "%s: contains a NUL byte (not a JSON text file)", path);
        return -1;
    }
    const int rc = attn_workload_parse(buf, path, wl, err, errsize);
    free(buf);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Registry
 * --------------------------------------------------------------------------------------------- */
static const attn_wl_entry attn_wl_entries[] = {
    {"default", "Llama-3-8B shapes (32/8 heads, d128): prefill 512-2048, chunked prefill, decode",
     attn_wl_default_build, NULL},
    {"check", "small cases over every option and layout (the default of `attn check`)", attn_wl_check_build, NULL},
    {"serving", "LLM serving step on a paged bf16 KV cache: 16 decodes + chunked prefill, block sizes 16/128",
     NULL, attn_wl_serving_run},
    {"diffusion", "diffusion transformers: joint image+text, padding/cross/video masks, quantized modes", NULL,
     attn_wl_diffusion_run},
#ifdef ATTN_CLI_MPI
    {"cp", "context parallelism over MPI (mpirun -np N attn run --workload cp): ring prefill, DCP decode, Ulysses", NULL,
     attn_wl_cp_run},
#endif
    {NULL, NULL, NULL, NULL}};

const attn_wl_entry *attn_wl_registry(void) {
    return attn_wl_entries;
}

const attn_wl_entry *attn_wl_find(const char *name) {
    for (const attn_wl_entry *e = attn_wl_entries; e->name; e++)
        if (strcmp(e->name, name) == 0)
            return e;
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Running one case
 * --------------------------------------------------------------------------------------------- */
typedef struct attn_wl_call {
    attn_ctx *ctx;
    const attn_wl_case *c;
    attn_tensor q, k, v, out, lse, cu_q, cu_k;
    attn_params params;
} attn_wl_call;

static attn_status attn_wl_call_fast(void *arg) {
    attn_wl_call *x = (attn_wl_call *)arg;
    attn_tensor *lse = x->c->lse ? &x->lse : NULL;
    if (x->c->layout == ATTN_WL_LAYOUT_VARLEN)
        return attn_forward_varlen(x->ctx, &x->q, &x->k, &x->v, &x->cu_q, &x->cu_k, &x->params, &x->out, lse);
    const attn_layout layout = x->c->layout == ATTN_WL_LAYOUT_BNSD ? ATTN_LAYOUT_BNSD : ATTN_LAYOUT_BSND;
    return attn_forward(x->ctx, layout, &x->q, &x->k, &x->v, &x->params, &x->out, lse);
}

static void attn_wl_describe(const attn_wl_case *c, attn_cli_result *r) {
    char dsz[32];
    if (c->head_size_v == c->head_size)
        snprintf(dsz, sizeof dsz, "d%lld", (long long)c->head_size);
    else
        snprintf(dsz, sizeof dsz, "d%lld/%lld", (long long)c->head_size, (long long)c->head_size_v);
    if (c->layout == ATTN_WL_LAYOUT_VARLEN)
        snprintf(r->shape, sizeof r->shape, "%lld seqs %lld/%lld h%lld/%lld %s", (long long)c->batch,
                 (long long)attn_wl_case_total_q(c), (long long)attn_wl_case_total_k(c), (long long)c->num_heads,
                 (long long)c->num_kv_heads, dsz);
    else
        snprintf(r->shape, sizeof r->shape, "%lldx%lld/%lld h%lld/%lld %s", (long long)c->batch, (long long)c->seq_q[0],
                 (long long)c->seq_k[0], (long long)c->num_heads, (long long)c->num_kv_heads, dsz);
    char *o = r->options;
    const size_t n = sizeof r->options;
    size_t len = 0;
#define ATTN_WL_OPT(...)                                                                                               \
    do {                                                                                                               \
        if (len < n)                                                                                                   \
            len += (size_t)snprintf(o + len, n - len, __VA_ARGS__);                                                    \
    } while (0)
    ATTN_WL_OPT("%s", attn_dtype_name(c->dtype));
    if (c->kv_dtype != c->dtype)
        ATTN_WL_OPT("/%s", attn_dtype_name(c->kv_dtype));
    if (c->layout == ATTN_WL_LAYOUT_BNSD)
        ATTN_WL_OPT(" bnsd");
    if (c->layout == ATTN_WL_LAYOUT_VARLEN)
        ATTN_WL_OPT(" varlen");
    if (c->causal == ATTN_CAUSAL_BOTTOM_RIGHT)
        ATTN_WL_OPT(" causal");
    if (c->causal == ATTN_CAUSAL_TOP_LEFT)
        ATTN_WL_OPT(" causal-tl");
    if (c->window_left >= 0 || c->window_right >= 0)
        ATTN_WL_OPT(" win(%d,%d)", c->window_left, c->window_right);
    if (c->softcap > 0)
        ATTN_WL_OPT(" cap%g", (double)c->softcap);
    if (c->softmax_scale > 0)
        ATTN_WL_OPT(" scale%g", (double)c->softmax_scale);
    if (c->alibi)
        ATTN_WL_OPT(" alibi");
    if (c->sinks)
        ATTN_WL_OPT(" sinks");
    if (c->lse)
        ATTN_WL_OPT(" lse");
#undef ATTN_WL_OPT
}

static void attn_wl_set_error(attn_cli_result *r, const char *what, attn_status st) {
    r->ok = 0;
    snprintf(r->error, sizeof r->error, "%s: %s: %s", what, attn_status_string(st), attn_last_error());
}

/* A view of `len` entries of dimension `dim` starting at `start` (shape/strides in elements). */
static attn_tensor attn_wl_slice(const attn_tensor *t, int32_t dim, int64_t start, int64_t len) {
    attn_tensor s = *t;
    s.data = (char *)t->data + (size_t)(start * t->strides[dim]) * attn_dtype_size(t->dtype);
    s.shape[dim] = len;
    return s;
}

/* The oracle in chunks of (sequence of a dense batch) x (kv head with its query heads), so that a long oracle
 * check can draw progress on a TTY. Each chunk is an independent attention problem (heads and sequences never
 * mix; ALiBi slopes and sinks are per query head), so the result equals one whole call. Dense: q/out
 * [B, ., Hq, .] or [B, Hq, ., .], lse [B, Hq, rows]; varlen: q/out [T, Hq, .], lse [Hq, T] (one batch chunk). */
static attn_status attn_wl_ref_chunked(const attn_cli_env *env, const attn_wl_case *c, const attn_tensor *q,
                                       const attn_tensor *k, const attn_tensor *v, const attn_tensor *cu_q,
                                       const attn_tensor *cu_k, const attn_params *params, attn_tensor *out,
                                       attn_tensor *lse_opt) {
    const int varlen = c->layout == ATTN_WL_LAYOUT_VARLEN;
    const int32_t hd = varlen ? 1 : c->layout == ATTN_WL_LAYOUT_BSND ? 2 : 1, lse_hd = varlen ? 0 : 1;
    const int64_t nb = varlen ? 1 : c->batch, hk = c->num_kv_heads, ratio = c->num_heads / c->num_kv_heads;
    const double t0 = attn_cli_now();
    int drawn = 0;
    char label[96];
    snprintf(label, sizeof label, "oracle %s", c->name);
    for (int64_t b = 0; b < nb; b++)
        for (int64_t g = 0; g < hk; g++) {
            attn_tensor tq = *q, tk = *k, tv = *v, to = *out, tl = lse_opt ? *lse_opt : *out;
            if (!varlen) {
                tq = attn_wl_slice(&tq, 0, b, 1), tk = attn_wl_slice(&tk, 0, b, 1), tv = attn_wl_slice(&tv, 0, b, 1);
                to = attn_wl_slice(&to, 0, b, 1);
                if (lse_opt)
                    tl = attn_wl_slice(&tl, 0, b, 1);
            }
            tq = attn_wl_slice(&tq, hd, g * ratio, ratio), to = attn_wl_slice(&to, hd, g * ratio, ratio);
            tk = attn_wl_slice(&tk, hd, g, 1), tv = attn_wl_slice(&tv, hd, g, 1);
            if (lse_opt)
                tl = attn_wl_slice(&tl, lse_hd, g * ratio, ratio);
            attn_params p = *params;
            if (p.alibi_slopes)
                p.alibi_slopes += g * ratio;
            if (p.sinks)
                p.sinks += g * ratio;
            const attn_layout layout = c->layout == ATTN_WL_LAYOUT_BNSD ? ATTN_LAYOUT_BNSD : ATTN_LAYOUT_BSND;
            const attn_status st = varlen ? attn_ref_forward_varlen(&tq, &tk, &tv, cu_q, cu_k, &p, &to,
                                                                    lse_opt ? &tl : NULL)
                                          : attn_ref_forward(layout, &tq, &tk, &tv, &p, &to, lse_opt ? &tl : NULL);
            if (st != ATTN_STATUS_OK) {
                if (drawn)
                    attn_cli_progress_clear(env);
                return st;
            }
            const int64_t done = b * hk + g + 1, total = nb * hk;
            const double elapsed = attn_cli_now() - t0;
            if (env->progress && done < total && elapsed > 1.0) {
                attn_cli_progress_draw(env, label, done, total, elapsed / (double)done * (double)(total - done));
                drawn = 1;
            }
        }
    if (drawn)
        attn_cli_progress_clear(env);
    return ATTN_STATUS_OK;
}

/* Oracle comparison of rows [off_b, off_b + r_b) of each sequence (r_b = min(r, seq_q_b); off_b = seq_q_b − r_b,
 * or 0 for top-left causal). Dense cases use strided sub-views; varlen cases gather the rows into packed
 * buffers with their own cu_seqlens. Returns 0, or −1 with r->error set. */
static int attn_wl_check(const attn_cli_env *env, attn_wl_call *x, double vmax, attn_cli_result *r) {
    const attn_wl_case *c = x->c;
    const int64_t want = env->check_rows < 0 ? INT64_MAX : env->check_rows;
    const int top_left = c->causal == ATTN_CAUSAL_TOP_LEFT;
    const attn_cli_tol tol = attn_cli_tol_for(c->dtype);
    const size_t qe = attn_dtype_size(c->dtype);
    attn_cli_cmp cmp;
    attn_cli_cmp_init(&cmp);
    attn_status st;
    int rc = -1;
    void *ref_out = NULL, *ref_lse = NULL, *q_sub = NULL, *got_out = NULL, *got_lse = NULL, *cu_sub = NULL;
    if (c->layout != ATTN_WL_LAYOUT_VARLEN) {
        const int32_t sd = c->layout == ATTN_WL_LAYOUT_BSND ? 1 : 2;
        const int64_t sq = c->seq_q[0], rows = sq < want ? sq : want, off = top_left ? 0 : sq - rows;
        attn_tensor qv = x->q, ov = x->out, lv = x->lse;
        qv.data = (char *)x->q.data + (size_t)(off * x->q.strides[sd]) * qe;
        qv.shape[sd] = rows;
        ov.data = (char *)x->out.data + (size_t)(off * x->out.strides[sd]) * qe;
        ov.shape[sd] = rows;
        lv.data = (float *)x->lse.data + off * x->lse.strides[2];
        lv.shape[2] = rows;
        ref_out = attn_cli_alloc((size_t)(c->batch * rows * c->num_heads * c->head_size_v) * qe);
        ref_lse = attn_cli_alloc((size_t)(c->batch * c->num_heads * rows) * sizeof(float));
        if (!ref_out || !ref_lse)
            goto oom;
        attn_tensor ro = attn_tensor_make(ref_out, c->dtype, 4, ov.shape);
        int64_t ls[3] = {c->batch, c->num_heads, rows};
        attn_tensor rl = attn_tensor_make(ref_lse, ATTN_DTYPE_F32, 3, ls);
        st = attn_wl_ref_chunked(env, c, &qv, &x->k, &x->v, NULL, NULL, &x->params, &ro, c->lse ? &rl : NULL);
        if (st != ATTN_STATUS_OK) {
            attn_wl_set_error(r, "attn_ref_forward", st);
            goto done;
        }
        attn_cli_compare(&ov, &ro, tol, vmax, &cmp);
        if (c->lse)
            attn_cli_compare_lse(&lv, &rl, tol, &cmp);
        r->rows_checked = env->check_rows < 0 || rows == sq ? -1 : rows;
    } else {
        const int64_t hq = c->num_heads, dq = c->head_size, dv = c->head_size_v;
        const int64_t total_q = attn_wl_case_total_q(c);
        int64_t rtot = 0, all = 1;
        for (int64_t b = 0; b < c->batch; b++) {
            const int64_t rows = c->seq_q[b] < want ? c->seq_q[b] : want;
            if (rows != c->seq_q[b])
                all = 0;
            rtot += rows;
        }
        q_sub = attn_cli_alloc((size_t)(rtot * hq * dq) * qe);
        ref_out = attn_cli_alloc((size_t)(rtot * hq * dv) * qe);
        got_out = attn_cli_alloc((size_t)(rtot * hq * dv) * qe);
        ref_lse = attn_cli_alloc((size_t)(hq * rtot) * sizeof(float));
        got_lse = attn_cli_alloc((size_t)(hq * rtot) * sizeof(float));
        cu_sub = attn_cli_alloc((size_t)(c->batch + 1) * sizeof(int32_t));
        if (!q_sub || !ref_out || !got_out || !ref_lse || !got_lse || !cu_sub)
            goto oom;
        int32_t *cu = (int32_t *)cu_sub;
        int64_t src = 0, dst = 0; /* row cursors in the full and the gathered problem */
        cu[0] = 0;
        for (int64_t b = 0; b < c->batch; b++) {
            const int64_t sq = c->seq_q[b], rows = sq < want ? sq : want, off = top_left ? 0 : sq - rows;
            for (int64_t i = 0; i < rows; i++) {
                const int64_t from = src + off + i, to = dst + i;
                memcpy((char *)q_sub + (size_t)(to * hq * dq) * qe, (char *)x->q.data + (size_t)(from * hq * dq) * qe,
                       (size_t)(hq * dq) * qe);
                memcpy((char *)got_out + (size_t)(to * hq * dv) * qe,
                       (char *)x->out.data + (size_t)(from * hq * dv) * qe, (size_t)(hq * dv) * qe);
                for (int64_t h = 0; h < hq; h++)
                    ((float *)got_lse)[h * rtot + to] = ((const float *)x->lse.data)[h * total_q + from];
            }
            src += sq, dst += rows;
            cu[b + 1] = (int32_t)dst;
        }
        int64_t qs[3] = {rtot, hq, dq}, os[3] = {rtot, hq, dv}, ls[2] = {hq, rtot}, cs[1] = {c->batch + 1};
        attn_tensor tq = attn_tensor_make(q_sub, c->dtype, 3, qs);
        attn_tensor ro = attn_tensor_make(ref_out, c->dtype, 3, os), go = attn_tensor_make(got_out, c->dtype, 3, os);
        attn_tensor rl = attn_tensor_make(ref_lse, ATTN_DTYPE_F32, 2, ls);
        attn_tensor gl = attn_tensor_make(got_lse, ATTN_DTYPE_F32, 2, ls);
        attn_tensor tc = attn_tensor_make(cu_sub, ATTN_DTYPE_I32, 1, cs);
        st = attn_wl_ref_chunked(env, c, &tq, &x->k, &x->v, &tc, &x->cu_k, &x->params, &ro, c->lse ? &rl : NULL);
        if (st != ATTN_STATUS_OK) {
            attn_wl_set_error(r, "attn_ref_forward_varlen", st);
            goto done;
        }
        attn_cli_compare(&go, &ro, tol, vmax, &cmp);
        if (c->lse)
            attn_cli_compare_lse(&gl, &rl, tol, &cmp);
        r->rows_checked = env->check_rows < 0 || all ? -1 : want;
    }
    r->max_abs_err = cmp.max_abs_err;
    if (cmp.num_bad) {
        r->ok = 0;
        snprintf(r->error, sizeof r->error, "%zu of %zu compared values outside tolerance (max abs err %.3g)",
                 cmp.num_bad, cmp.num_compared, cmp.max_abs_err);
    }
    rc = 0;
    goto done;
oom:
    r->ok = 0;
    snprintf(r->error, sizeof r->error, "out of memory for the oracle comparison");
done:
    attn_cli_free(ref_out), attn_cli_free(ref_lse), attn_cli_free(q_sub);
    attn_cli_free(got_out), attn_cli_free(got_lse), attn_cli_free(cu_sub);
    return rc;
}

int attn_wl_run_case(const attn_cli_env *env, const attn_wl_case *c, attn_cli_result *r) {
    attn_cli_result_init(r, c->name);
    attn_wl_describe(c, r);
    const int64_t hq = c->num_heads, hk = c->num_kv_heads, dq = c->head_size, dv = c->head_size_v;
    const int64_t tq = attn_wl_case_total_q(c), tk = attn_wl_case_total_k(c);
    int64_t pairs = 0;
    if (c->layout == ATTN_WL_LAYOUT_VARLEN) {
        for (int64_t b = 0; b < c->batch; b++)
            pairs += attn_cli_visible_pairs(attn_wl_seq_q(c, b), attn_wl_seq_k(c, b), c->causal, c->window_left,
                                            c->window_right);
    } else {
        pairs = c->batch * attn_cli_visible_pairs(c->seq_q[0], c->seq_k[0], c->causal, c->window_left, c->window_right);
    }
    r->gflop = attn_cli_gflop(pairs, hq, dq, dv);

    attn_cli_rng rng;
    attn_cli_rng_seed(&rng, c->seed);
    double vmax = 0.0;
    attn_wl_call x;
    memset(&x, 0, sizeof x);
    x.ctx = env->ctx;
    x.c = c;
    void *q = attn_cli_alloc_fill(&rng, c->dtype, (size_t)(tq * hq * dq), -2.0, 2.0, NULL);
    void *k = attn_cli_alloc_fill(&rng, c->kv_dtype, (size_t)(tk * hk * dq), -2.0, 2.0, NULL);
    void *v = attn_cli_alloc_fill(&rng, c->kv_dtype, (size_t)(tk * hk * dv), -1.0, 1.0, &vmax);
    void *out = attn_cli_alloc((size_t)(tq * hq * dv) * attn_dtype_size(c->dtype));
    void *lse = attn_cli_alloc((size_t)(tq * hq) * sizeof(float));
    int32_t *cu_q = (int32_t *)attn_cli_alloc((size_t)(c->batch + 1) * sizeof(int32_t));
    int32_t *cu_k = (int32_t *)attn_cli_alloc((size_t)(c->batch + 1) * sizeof(int32_t));
    float *slopes = (float *)attn_cli_alloc((size_t)hq * sizeof(float));
    float *sinks = (float *)attn_cli_alloc((size_t)hq * sizeof(float));
    int rc = -1;
    if (!q || !k || !v || !out || !lse || !cu_q || !cu_k || !slopes || !sinks) {
        r->ok = 0;
        snprintf(r->error, sizeof r->error, "out of memory for the case's tensors");
        goto done;
    }
    /* NaN-fill outputs so rows the library forgets to write cannot pass the comparison */
    memset(out, 0xFF, (size_t)(tq * hq * dv) * attn_dtype_size(c->dtype));
    memset(lse, 0xFF, (size_t)(tq * hq) * sizeof(float));
    for (int64_t h = 0; h < hq; h++)
        sinks[h] = (float)attn_cli_rng_uniform(&rng, -1.0, 1.0);
    attn_cli_alibi_slopes(hq, slopes);
    attn_params_init(&x.params);
    x.params.softmax_scale = c->softmax_scale;
    x.params.causal = c->causal;
    x.params.window_left = c->window_left;
    x.params.window_right = c->window_right;
    x.params.softcap = c->softcap;
    x.params.alibi_slopes = c->alibi ? slopes : NULL;
    x.params.sinks = c->sinks ? sinks : NULL;
    if (c->layout == ATTN_WL_LAYOUT_VARLEN) {
        cu_q[0] = cu_k[0] = 0;
        for (int64_t b = 0; b < c->batch; b++) {
            cu_q[b + 1] = cu_q[b] + (int32_t)c->seq_q[b];
            cu_k[b + 1] = cu_k[b] + (int32_t)c->seq_k[b];
        }
        int64_t qs[3] = {tq, hq, dq}, ks[3] = {tk, hk, dq}, vs[3] = {tk, hk, dv}, os[3] = {tq, hq, dv};
        int64_t ls[2] = {hq, tq}, cs[1] = {c->batch + 1};
        x.q = attn_tensor_make(q, c->dtype, 3, qs);
        x.k = attn_tensor_make(k, c->kv_dtype, 3, ks);
        x.v = attn_tensor_make(v, c->kv_dtype, 3, vs);
        x.out = attn_tensor_make(out, c->dtype, 3, os);
        x.lse = attn_tensor_make(lse, ATTN_DTYPE_F32, 2, ls);
        x.cu_q = attn_tensor_make(cu_q, ATTN_DTYPE_I32, 1, cs);
        x.cu_k = attn_tensor_make(cu_k, ATTN_DTYPE_I32, 1, cs);
    } else {
        const int bnsd = c->layout == ATTN_WL_LAYOUT_BNSD;
        const int64_t b = c->batch, sq = c->seq_q[0], sk = c->seq_k[0];
        int64_t qs[4] = {b, bnsd ? hq : sq, bnsd ? sq : hq, dq}, ks[4] = {b, bnsd ? hk : sk, bnsd ? sk : hk, dq};
        int64_t vs[4] = {b, bnsd ? hk : sk, bnsd ? sk : hk, dv}, os[4] = {b, bnsd ? hq : sq, bnsd ? sq : hq, dv};
        int64_t ls[3] = {b, hq, sq};
        x.q = attn_tensor_make(q, c->dtype, 4, qs);
        x.k = attn_tensor_make(k, c->kv_dtype, 4, ks);
        x.v = attn_tensor_make(v, c->kv_dtype, 4, vs);
        x.out = attn_tensor_make(out, c->dtype, 4, os);
        x.lse = attn_tensor_make(lse, ATTN_DTYPE_F32, 3, ls);
    }

    attn_status st;
    if (env->mode == ATTN_CLI_MODE_CHECK) {
        st = attn_wl_call_fast(&x);
    } else {
        const int32_t repeats = env->repeats > 0 ? env->repeats
                                : c->repeats > 0 ? c->repeats
                                                 : attn_cli_default_repeats(env);
        st = attn_cli_time(env, c->name, repeats, attn_wl_call_fast, &x, &r->timing);
    }
    if (st != ATTN_STATUS_OK) {
        attn_wl_set_error(r, c->layout == ATTN_WL_LAYOUT_VARLEN ? "attn_forward_varlen" : "attn_forward", st);
        rc = 0;
        goto done;
    }
    if (getenv("ATTN_CLI_FAULT") && tq * hq * dv > 0) {
        /* fault injection for tests/cli: corrupt one output value in a compared row (the last row, or the first
         * for top-left causal) so that the oracle comparison must fail */
        const size_t at = c->causal == ATTN_CAUSAL_TOP_LEFT ? 0 : (size_t)(tq * hq * dv - 1);
        attn_cli_store(out, c->dtype, at, attn_cli_load(out, c->dtype, at) + 1.0f);
    }
    if (env->check_rows != 0 && attn_wl_check(env, &x, vmax, r))
        goto done;
    rc = 0;
done:
    attn_cli_free(q), attn_cli_free(k), attn_cli_free(v), attn_cli_free(out), attn_cli_free(lse);
    attn_cli_free(cu_q), attn_cli_free(cu_k), attn_cli_free(slopes), attn_cli_free(sinks);
    return rc;
}

void attn_wl_case_cost(const attn_wl_case *c, int64_t check_rows, double *fast_gflop, double *oracle_gflop) {
    const int64_t want = check_rows < 0 ? INT64_MAX : check_rows;
    double fast = 0.0, oracle = 0.0;
    for (int64_t b = 0; b < c->batch; b++) {
        const int64_t sq = attn_wl_seq_q(c, b), sk = attn_wl_seq_k(c, b), rows = sq < want ? sq : want;
        const int64_t n = c->layout == ATTN_WL_LAYOUT_VARLEN ? 1 : c->batch; /* dense: all sequences alike */
        const double f = attn_cli_gflop(attn_cli_visible_pairs(sq, sk, c->causal, c->window_left, c->window_right),
                                        c->num_heads, c->head_size, c->head_size_v);
        /* the last (first for top-left) rows sit at the same positions as in the full problem */
        const double o = check_rows == 0 ? 0.0
                                         : attn_cli_gflop(attn_cli_visible_pairs(rows, sk, c->causal, c->window_left,
                                                                                 c->window_right),
                                                          c->num_heads, c->head_size, c->head_size_v);
        fast += (double)n * f, oracle += (double)n * o;
        if (n > 1)
            break;
    }
    *fast_gflop = fast;
    *oracle_gflop = oracle;
}

int attn_wl_check_cost(const attn_cli_env *env, const attn_workload *wl) {
    if (env->force)
        return ATTN_CLI_EXIT_OK;
    for (int32_t i = 0; i < wl->num_cases; i++) {
        const attn_wl_case *c = &wl->cases[i];
        double fast = 0.0, oracle = 0.0;
        attn_wl_case_cost(c, env->check_rows, &fast, &oracle);
        if (env->mode == ATTN_CLI_MODE_BENCH)
            oracle = 0.0;
        if (fast > ATTN_CLI_MAX_FAST_GFLOP || oracle > ATTN_CLI_MAX_ORACLE_GFLOP) {
            fprintf(env->err,
                    "attn %s: case '%s' (cases[%d]) is too large: ~%.3g GFLOP per attention call (limit %.0f), "
                    "~%.3g GFLOP of oracle work (scalar double, ~1 GFLOP/s; limit %.0f)\n"
                    "Pass --force to run it anyway%s.\n",
                    env->command, c->name, (int)i, fast, ATTN_CLI_MAX_FAST_GFLOP, oracle, ATTN_CLI_MAX_ORACLE_GFLOP,
                    fast > ATTN_CLI_MAX_FAST_GFLOP ? "" : ", or compare fewer rows with --check-rows R");
            return ATTN_CLI_EXIT_USAGE;
        }
    }
    return ATTN_CLI_EXIT_OK;
}

int attn_wl_run_cases(const attn_cli_env *env, const attn_workload *wl) {
    const int guard = attn_wl_check_cost(env, wl);
    if (guard)
        return guard;
    attn_cli_report rep;
    char note[160];
    attn_cli_report_begin(&rep, env, wl->name, attn_cli_check_note(env, note, sizeof note));
    for (int32_t i = 0; i < wl->num_cases; i++) {
        attn_cli_result r;
        attn_wl_run_case(env, &wl->cases[i], &r);
        attn_cli_report_add(&rep, &r);
    }
    return attn_cli_report_end(&rep);
}
