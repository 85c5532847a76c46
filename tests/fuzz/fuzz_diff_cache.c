/*
 * fuzz_diff_cache.c — differential target of the cache writes (fuzz_diff.h): attn_reshape_and_cache,
 * attn_reshape_and_cache_scaled, attn_reshape_and_cache_notify and attn_reshape_and_cache_scaled_notify (the
 * first byte picks one) with key/value f32/f16/bf16 holding ordinary, large, tiny, NaN and ±inf values, a cache
 * of every dtype (f32/f16/bf16, fp8 E4M3/E5M2) pre-filled with random bytes, int32 or int64 slot mappings shorter
 * than the tokens or not, with -1 and repeated slots, and decoded scales (a quarter invalid: 0, -1, NaN, inf).
 * Every usable kernel table against the literal oracle attn_ref_reshape_and_cache_scaled (src/ref): the whole
 * cache bitwise equal (written slots, later token wins, every other byte untouched); an fp8 cache with an
 * invalid scale refused (INVALID_ARGUMENT, cache untouched, no callback); a float cache ignores the scales; a
 * notifying write calls back exactly once with num_written = the slots >= 0.
 */
#include "fuzz_diff.h"
#include "ref/ref.h"

typedef struct fzd_notified {
    int calls;
    int64_t written;
} fzd_notified;
static void fzd_on_stored(void *user, const attn_kv_stored *ev) {
    fzd_notified *n = (fzd_notified *)user;
    n->calls++, n->written = ev->num_written;
}

static int fzd_cache_run(const uint8_t *data, size_t size) {
    fzd_begin("diff_cache");
    fzd_init_tables();
    fzd_rd r = {data, size, 0};
    static const attn_dtype cdts[8] = {ATTN_DTYPE_F32,      ATTN_DTYPE_F16,      ATTN_DTYPE_BF16,
                                       ATTN_DTYPE_FP8_E4M3, ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_FP8_E4M3,
                                       ATTN_DTYPE_FP8_E5M2, ATTN_DTYPE_F16};
    static const int64_t bss[8] = {1, 2, 3, 4, 8, 16, 5, 7};
    const uint8_t eb = fzd_u8(&r), sb = fzd_u8(&r), db = fzd_u8(&r), vb = fzd_u8(&r);
    const int entry = eb & 3; /* 0 plain, 1 scaled, 2 notify, 3 scaled + notify */
    const int64_t T = 1 + ((eb >> 2) & 7), Hkv = 1 + ((eb >> 5) & 3), D = 1 + (sb & 15), BS = bss[(sb >> 4) & 7];
    const int64_t NB = 1 + ((sb >> 7) ? 5 : db >> 6);
    const attn_dtype kdt = fzd_float_dtypes[db & 3], cdt = cdts[(db >> 2) & 7];
    const int wide = (db >> 5) & 1;
    const int64_t ns = (vb & 0x80) ? T - (int64_t)(vb >> 4 & 7) % T : T; /* slot_mapping entries (<= T) */
    const uint8_t scb = fzd_u8(&r);
    const float ks = (entry & 1) ? fzd_scale_value(scb) : 1.0f, vs = (entry & 1) ? fzd_scale_value(scb >> 4) : 1.0f;
    const int bad = fzd_is_fp8(cdt) && !(isfinite(ks) && ks > 0.0f && isfinite(vs) && vs > 0.0f);
    th_rng g;
    th_rng_seed(&g, fzd_seed(&r));
    fzd_say("entry=%s T=%lld Hkv=%lld D=%lld key/value=%s cache=%s NB=%lld BS=%lld slots=%s[%lld] k_scale=%g "
            "v_scale=%g specials=%d",
            (const char *[]){"reshape_and_cache", "scaled", "notify", "scaled_notify"}[entry], (long long)T,
            (long long)Hkv, (long long)D, attn_dtype_name(kdt), attn_dtype_name(cdt), (long long)NB, (long long)BS,
            wide ? "i64" : "i32", (long long)ns, (double)ks, (double)vs, vb & 3);
    fzd_kind = 1 + entry + 4 * (int)((db >> 2) & 7) + 32 * bad;
    /* key/value: uniform values, amplitude 1..1e5, with NaN / ±inf / 1e30 / tiny ones for vb & 3 != 0 */
    const int64_t n = T * Hkv * D;
    void *key = fzd_alloc(kdt, n), *val = fzd_alloc(kdt, n);
    static const double amps[4] = {1.0, 30.0, 1000.0, 1e5};
    fzd_fill_uniform(&g, amps[(vb >> 2) & 3], key, kdt, n), fzd_fill_uniform(&g, amps[(vb >> 2) & 3], val, kdt, n);
    static const float special[8] = {NAN, INFINITY, -INFINITY, 1e30f, -1e30f, 1e-30f, 3e-5f, 500.0f};
    for (int64_t i = 0; i < n && (vb & 3); i++) {
        if (th_rng_int(&g, 0, 3) == 0)
            th_set(key, kdt, (size_t)i, special[th_rng_int(&g, 0, 7)]);
        if (th_rng_int(&g, 0, 3) == 0)
            th_set(val, kdt, (size_t)i, special[th_rng_int(&g, 0, 7)]);
    }
    float *kf = (float *)fzd_alloc(ATTN_DTYPE_F32, n), *vf = (float *)fzd_alloc(ATTN_DTYPE_F32, n);
    for (int64_t i = 0; i < n; i++)
        kf[i] = th_get(key, kdt, (size_t)i), vf[i] = th_get(val, kdt, (size_t)i);
    int64_t *slots = (int64_t *)fzd_alloc(ATTN_DTYPE_I64, T), written = 0;
    void *sm = fzd_alloc(wide ? ATTN_DTYPE_I64 : ATTN_DTYPE_I32, ns);
    for (int64_t t = 0; t < T; t++) {
        slots[t] = t < ns ? th_rng_int(&g, -1, NB * BS - 1) : -1; /* tokens past the mapping are not written */
        if (t < ns) {
            if (wide)
                ((int64_t *)sm)[t] = slots[t];
            else
                ((int32_t *)sm)[t] = (int32_t)slots[t];
            written += slots[t] >= 0;
        }
    }
    const int64_t nc = 2 * NB * BS * Hkv * D;
    const size_t cbytes = fzd_bytes(cdt, nc);
    uint8_t *init = (uint8_t *)fzd_alloc(ATTN_DTYPE_U8, (int64_t)cbytes),
            *want = (uint8_t *)fzd_alloc(ATTN_DTYPE_U8, (int64_t)cbytes);
    for (size_t i = 0; i < cbytes; i++)
        init[i] = (uint8_t)th_rng_int(&g, 0, 255);
    memcpy(want, init, cbytes);
    if (!bad)
        attn_ref_reshape_and_cache_scaled(kf, vf, T, Hkv, D, slots, want, cdt, NB, BS, ks, vs);
    const int64_t kvs[3] = {T, Hkv, D}, cs[5] = {2, NB, BS, Hkv, D}, ss[1] = {ns};
    attn_tensor tk = attn_tensor_make(key, kdt, 3, kvs), tv = attn_tensor_make(val, kdt, 3, kvs);
    attn_tensor tsm = attn_tensor_make(sm, wide ? ATTN_DTYPE_I64 : ATTN_DTYPE_I32, 1, ss);
    for (int t = 0; t < fzd_ntables; t++) {
        const char *isa = fzd_tables[t].name;
        void *cache = fzd_alloc(ATTN_DTYPE_U8, (int64_t)cbytes);
        memcpy(cache, init, cbytes);
        attn_tensor tc = attn_tensor_make(cache, cdt, 5, cs);
        fzd_notified nt = {0, -1};
        attn_kv_notify kn = {fzd_on_stored, &nt, 3};
        attn_ctx *ctx = fzd_tables[t].ctx;
        const attn_status st = entry == 0   ? attn_reshape_and_cache(ctx, &tk, &tv, &tc, &tsm)
                               : entry == 1 ? attn_reshape_and_cache_scaled(ctx, &tk, &tv, &tc, &tsm, ks, vs)
                               : entry == 2
                                   ? attn_reshape_and_cache_notify(ctx, &tk, &tv, &tc, &tsm, &kn)
                                   : attn_reshape_and_cache_scaled_notify(ctx, &tk, &tv, &tc, &tsm, ks, vs, &kn);
        if (bad) {
            if (st != ATTN_STATUS_INVALID_ARGUMENT)
                fzd_fail("cache write on %s accepted k_scale=%g v_scale=%g for an %s cache (status %s)", isa,
                         (double)ks, (double)vs, attn_dtype_name(cdt), attn_status_string(st));
            if (nt.calls != 0)
                fzd_fail("cache write on %s refused but called back %d times", isa, nt.calls);
        } else {
            fzd_check_status("cache write", isa, st);
            if (entry >= 2 && (nt.calls != 1 || nt.written != written))
                fzd_fail("cache write on %s: %d callbacks with num_written=%lld, expected 1 with %lld", isa, nt.calls,
                         (long long)nt.written, (long long)written);
        }
        if (memcmp(cache, want, cbytes) != 0) {
            size_t i = 0;
            while (((uint8_t *)cache)[i] == want[i])
                i++;
            const size_t es = attn_dtype_size(cdt);
            fzd_fail("cache write on %s: cache byte %zu (element %zu) = 0x%02x, oracle 0x%02x (before 0x%02x)", isa, i,
                     i / es, ((uint8_t *)cache)[i], want[i], init[i]);
        }
        attn_clear_error();
        free(cache);
    }
    free(key), free(val), free(kf), free(vf), free(slots), free(sm), free(init), free(want);
    return 0;
}

#ifndef FZ_NO_MAIN
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return fzd_cache_run(data, size);
}
#endif
