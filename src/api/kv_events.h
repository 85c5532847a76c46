/*
 * kv_events.h — the "KV stored" notification pieces the cache write (src/api/api_cache.c) calls: the check
 * of an attn_kv_notify before anything is written and the one callback after a successful write
 * (src/api/api_kv_events.c).
 */
#ifndef ATTN_API_KV_EVENTS_H
#define ATTN_API_KV_EVENTS_H

#include "attn/attn.h"

/* notify non-NULL, on_stored non-NULL, layer_idx >= 0; INVALID_ARGUMENT naming the field otherwise. */
attn_status attn_kv_events_check_notify(const attn_kv_notify *notify);
/* Builds the event of a write of slot_mapping into kv_cache (counts, runs) and makes the one on_stored call. */
void attn_kv_events_notify(attn_tensor *kv_cache, const attn_tensor *slot_mapping, const attn_kv_notify *notify);

#endif
