/*
 * partition.c — the work partition of a plan (FlashInfer's scheduler, vLLM paged_attention_v2's
 * partitions): one block per (request, kv head, head chunk, token block), exactly the blocks the driver's
 * attn_fwd_run would form, and for decode blocks whose keys span several ATTN_KV_PARTITION partitions one
 * split item per partition, with the partial states' workspace offsets. Partition boundaries sit at
 * absolute key positions and are folded in ascending order, so splitting or not never changes a bit;
 * the choice to split is a pure scheduling decision and depends only on the request itself.
 */
#include "attention/fwd.h"
#include <stdint.h>

#include "core/checked_math.h"
#include "plan/plan.h"

/* The driver's block shape for this config (same function the driver uses, so blocks agree). */
static void attn_partition_shape(const attn_plan_config *cfg, attn_fwd_shape *sh) {
    attn_problem p;
    p.num_heads = cfg->num_heads;
    p.num_kv_heads = cfg->num_kv_heads;
    attn_fwd_shape_of(&p, sh);
}

void attn_partition_pass(attn_plan *plan, const attn_request *reqs, int64_t num_reqs, attn_arena *a,
                         int materialize) {
    attn_fwd_shape sh;
    attn_partition_shape(&plan->cfg, &sh);
    const int64_t num_kv_heads = plan->cfg.num_kv_heads, head_size = plan->cfg.head_size;
    int64_t nb = 0, ndirect = 0, nsplit = 0, nsplit_blocks = 0, ws_floats = 0;
    for (int pass = 0; pass < 1 + materialize; pass++) {
        /* pass 0 counts; pass 1 (materialize only) fills, recomputing the same running totals */
        nb = ndirect = nsplit = nsplit_blocks = ws_floats = 0;
        if (pass == 0) {
            /* the count in closed form, O(num_reqs) and overflow-checked, so an oversized plan is refused before
             * anything loops over its blocks: a request has num_kv_heads·head_chunks·token_blocks blocks whose
             * rows sum to num_heads·q_len (the heads of the chunks sum to the group, the tokens to q_len) */
            int ok = 1;
            for (int64_t i = 0; i < num_reqs && ok; i++) {
                const int64_t q_len = reqs[i].num_scheduled_tokens, kv_len = attn_meta_kv_len(&reqs[i]);
                const int32_t cls = attn_meta_class(&reqs[i], plan->decode_threshold);
                const int64_t num_parts = (kv_len + ATTN_KV_PARTITION - 1) / ATTN_KV_PARTITION;
                const int split = cls == ATTN_CLASS_DECODE && num_parts > 1;
                const int64_t token_blocks = (q_len + sh.tokens_per_block - 1) / sh.tokens_per_block;
                int64_t blocks, rows, t;
                ok = attn_mul_i64(num_kv_heads * sh.head_chunks, token_blocks, &blocks) &&
                     attn_mul_i64(plan->cfg.num_heads, q_len, &rows) && attn_add_i64(nb, blocks, &nb);
                if (ok && split)
                    ok = attn_add_i64(nsplit_blocks, blocks, &nsplit_blocks) && attn_mul_i64(blocks, num_parts, &t) &&
                         attn_add_i64(nsplit, t, &nsplit) &&
                         attn_mul_i64(rows, attn_fwd_split_state_floats(1, head_size), &t) &&
                         attn_mul_i64(t, num_parts, &t) && attn_add_i64(ws_floats, t, &ws_floats);
                else if (ok)
                    ok = attn_add_i64(ndirect, blocks, &ndirect);
            }
            if (!ok || ws_floats > (int64_t)(SIZE_MAX / sizeof(float)) - 64) {
                if (!a->overflow) a->overflow_at = "the work partition";
                a->overflow = 1;
                nb = ndirect = nsplit = nsplit_blocks = ws_floats = 0;
            }
        }
        for (int64_t i = 0; i < num_reqs && pass == 1; i++) {
            /* count pass: any order gives the totals; fill pass: plan order from the metadata arrays */
            int64_t q_len, kv_len;
            int32_t cls;
            if (materialize) {
                q_len = plan->query_start_loc[i + 1] - plan->query_start_loc[i];
                kv_len = plan->seq_lens[i];
                cls = plan->classes[i];
            } else {
                q_len = reqs[i].num_scheduled_tokens;
                kv_len = attn_meta_kv_len(&reqs[i]);
                cls = attn_meta_class(&reqs[i], plan->decode_threshold);
            }
            const int64_t num_parts = (kv_len + ATTN_KV_PARTITION - 1) / ATTN_KV_PARTITION;
            const int split = cls == ATTN_CLASS_DECODE && num_parts > 1; /* flash-decoding */
            const int64_t token_blocks = (q_len + sh.tokens_per_block - 1) / sh.tokens_per_block;
            for (int64_t g = 0; g < num_kv_heads; g++)
                for (int64_t c = 0; c < sh.head_chunks; c++)
                    for (int64_t tb = token_blocks - 1; tb >= 0; tb--) { /* long causal blocks first */
                        const int64_t t0 = tb * sh.tokens_per_block;
                        const int64_t tokens = q_len - t0 < sh.tokens_per_block ? q_len - t0 : sh.tokens_per_block;
                        int64_t heads = sh.group - c * sh.heads_per_block;
                        if (heads > sh.heads_per_block) heads = sh.heads_per_block;
                        const int64_t rows = tokens * heads;
                        if (pass == 1) {
                            attn_fwd_work_block *b = &plan->blocks[nb];
                            b->req = (int32_t)i;
                            b->kv_head = (int32_t)g;
                            b->head_chunk = (int32_t)c;
                            b->token_block = (int32_t)tb;
                            b->num_rows = (int32_t)rows;
                            b->num_parts = (int32_t)num_parts;
                            b->ws_offset = split ? ws_floats : -1;
                            if (split) {
                                plan->split_blocks[nsplit_blocks] = (int32_t)nb;
                                for (int64_t k = 0; k < num_parts; k++) {
                                    plan->splits[nsplit + k].block = (int32_t)nb;
                                    plan->splits[nsplit + k].part = (int32_t)k;
                                }
                            } else {
                                plan->direct[ndirect] = (int32_t)nb;
                            }
                        }
                        if (split) {
                            nsplit_blocks++;
                            nsplit += num_parts;
                            ws_floats += num_parts * attn_fwd_split_state_floats(rows, head_size);
                        } else {
                            ndirect++;
                        }
                        nb++;
                    }
        }
        if (pass == 1 && (nb != plan->num_work_blocks || ndirect != plan->num_direct || nsplit != plan->num_split_items ||
                          nsplit_blocks != plan->num_split_blocks))
            plan->workspace_size = SIZE_MAX; /* closed-form count and fill disagree: attn_plan_build says INTERNAL */
        if (pass == 0) {
            plan->num_work_blocks = nb;
            plan->num_direct = ndirect;
            plan->num_split_items = nsplit;
            plan->num_split_blocks = nsplit_blocks;
            plan->workspace_size = ((size_t)ws_floats * sizeof(float) + 63) & ~(size_t)63;
            plan->blocks = attn_arena_carve(a, "blocks", (size_t)nb, sizeof(attn_fwd_work_block));
            plan->direct = attn_arena_carve(a, "direct", (size_t)ndirect, sizeof(int32_t));
            plan->splits = attn_arena_carve(a, "splits", (size_t)nsplit, sizeof(attn_fwd_split_item));
            plan->split_blocks = attn_arena_carve(a, "split_blocks", (size_t)nsplit_blocks, sizeof(int32_t));
        }
    }
}
