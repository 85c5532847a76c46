/*
 * api_kv_events.c — the per-layer "KV stored" notification of disaggregated prefill: a cache
 * write (attn_reshape_and_cache_ex, src/api/api_cache.c) followed by one synchronous callback that describes the rows
 * written, and the iterator over those rows as (block, row range) runs. It computes nothing itself and
 * allocates nothing: the runs are derived from the caller's slot_mapping on demand.
 */
#include <stdint.h>
#include <string.h>

#include "api/kv_events.h"
#include "core/error.h"
#include "core/tensor.h"

/* Slot of token t of the event's slot_mapping (int64 or int32, validated by the write). */
static int64_t kv_events_slot(const attn_kv_stored *ev, int64_t t) {
    return attn_tensor_get_index(ev->slot_mapping, t);
}

int attn_kv_stored_next(const attn_kv_stored *event, int64_t *cursor, attn_kv_block_rows *run) {
    if (!event || !cursor || !run || !event->slot_mapping || event->block_size < 1) return 0;
    int64_t t = *cursor < 0 ? 0 : *cursor;
    while (t < event->num_tokens && kv_events_slot(event, t) < 0) t++; /* PAD_SLOT_ID: nothing stored */
    if (t >= event->num_tokens) {
        *cursor = event->num_tokens;
        return 0;
    }
    const int64_t bs = event->block_size, first = kv_events_slot(event, t);
    int64_t n = 1; /* extend while the next token lands on the next row of the same block */
    while (t + n < event->num_tokens && first % bs + n < bs && kv_events_slot(event, t + n) == first + n) n++;
    run->block_idx = first / bs;
    run->row_start = first % bs;
    run->row_end = first % bs + n;
    run->token_start = t;
    *cursor = t + n;
    return 1;
}

attn_status attn_kv_events_check_notify(const attn_kv_notify *notify) {
    ATTN_CHECK(notify != NULL, ATTN_STATUS_INVALID_ARGUMENT, "notify: is NULL (use attn_reshape_and_cache)");
    ATTN_CHECK(notify->on_stored != NULL, ATTN_STATUS_INVALID_ARGUMENT, "notify: on_stored is NULL");
    ATTN_CHECK(notify->layer_idx >= 0, ATTN_STATUS_INVALID_ARGUMENT, "notify: layer_idx=%d, expected >= 0",
               (int)notify->layer_idx);
    return ATTN_STATUS_OK;
}

void attn_kv_events_notify(attn_tensor *kv_cache, const attn_tensor *slot_mapping, const attn_kv_notify *notify) {
    attn_kv_stored ev;
    memset(&ev, 0, sizeof ev);
    ev.layer_idx = notify->layer_idx;
    ev.kv_cache = kv_cache;
    ev.slot_mapping = slot_mapping;
    ev.num_tokens = slot_mapping->shape[0];
    ev.block_size = kv_cache->shape[2];
    for (int64_t t = 0; t < ev.num_tokens; t++) ev.num_written += kv_events_slot(&ev, t) >= 0;
    attn_kv_block_rows run;
    for (int64_t cur = 0; attn_kv_stored_next(&ev, &cur, &run);) ev.num_runs++;
    notify->on_stored(notify->user, &ev);
}

/* The notify wrappers of attn_reshape_and_cache_ex: notify is required here (NULL is INVALID_ARGUMENT, checked
 * first, as before the options entry existed). */
attn_status attn_reshape_and_cache_notify(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                          attn_tensor *kv_cache, const attn_tensor *slot_mapping,
                                          const attn_kv_notify *notify) {
    ATTN_TRY(attn_kv_events_check_notify(notify));
    attn_cache_write_options o;
    attn_cache_write_options_init(&o);
    o.notify = notify;
    return attn_reshape_and_cache_ex(ctx, key, value, kv_cache, slot_mapping, &o);
}

attn_status attn_reshape_and_cache_scaled_notify(attn_ctx *ctx, const attn_tensor *key, const attn_tensor *value,
                                                 attn_tensor *kv_cache, const attn_tensor *slot_mapping, float k_scale,
                                                 float v_scale, const attn_kv_notify *notify) {
    ATTN_TRY(attn_kv_events_check_notify(notify));
    attn_cache_write_options o;
    attn_cache_write_options_init(&o);
    o.k_scale = k_scale, o.v_scale = v_scale;
    o.notify = notify;
    return attn_reshape_and_cache_ex(ctx, key, value, kv_cache, slot_mapping, &o);
}
