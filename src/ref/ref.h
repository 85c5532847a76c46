/*
 * ref.h — the oracle (STYLE.md R4): scalar C, double accumulation, one thread, loops in formula order.
 * Used by tests, `attn check` and the attn_ref_* entry points only; never optimised.
 */
#ifndef ATTN_REF_H
#define ATTN_REF_H

#include "core/problem.h"

/* Computes every sequence of `p` literally: for each (sequence, head, query row) the visible logits in
 * double, soft-cap, ALiBi, the softmax with the optional sink, out and LSE (natural log).
 * Returns OUT_OF_MEMORY if its scratch row cannot be allocated (nothing written then). */
attn_status attn_ref_run(const attn_problem *p);

/* The oracle's own literal visibility rule (CONVENTIONS.md "Positions and masks") for query row i and key
 * j of sequence s and query head h: causal, window, key-padding mask and explicit mask, ANDed. */
int attn_ref_visible(const attn_problem *p, const attn_seq_view *s, int64_t h, int64_t i, int64_t j);

#endif
