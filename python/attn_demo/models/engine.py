"""A small continuous-batching engine with a paged KV cache (vLLM V1-style metadata), NumPy.

Per layer the KV cache is [2, num_blocks, block_size, num_kv_heads, head_size] float32.
Each step the scheduler packs up to `token_budget` new tokens: running requests' decodes
first (1 token each), then prefill chunks of running requests, then newly admitted requests
(at most `max_running` at once; a request joins when another finishes). Long prompts are
split across steps (chunked prefill). Per step it builds

    query_start_loc int32 [B+1]   cumulative new-token counts
    seq_lens        int32 [B]     context length including this step's new tokens
    block_table     int32 [B, max_blocks_per_seq]  (unused entries are 0, as in vLLM)
    slot_mapping    int64 [T]     block_table[b, pos // block_size] * block_size + pos % block_size

writes each layer's new K/V into the cache via slot_mapping, and calls

    paged_attention(q [T,Hq,D], kv_cache, query_start_loc, seq_lens, block_table, causal=True)
        -> out [T,Hq,D]

(causal diagonal aligned bottom-right, scale 1/sqrt(head_size) by default).

Alternatively `attention_layer(layer, q, k, v, kv_cache, step_meta) -> out [T,Hq,D]` replaces both
the NumPy cache write and paged_attention (a vLLM-style backend: it writes k/v through
step_meta["slot_mapping"] itself). step_meta is one dict per step (same object for every layer):
query_start_loc, seq_lens, block_table, slot_mapping, step.
"""

import time
from dataclasses import dataclass, field

import numpy as np

from .attention_ref import reference_paged_attention


@dataclass
class Request:
    rid: int
    prompt: list
    max_new_tokens: int
    tokens: list = field(default_factory=list)   # prompt + generated
    output: list = field(default_factory=list)
    num_computed: int = 0
    blocks: list = field(default_factory=list)
    margins: list = field(default_factory=list)  # top1 - top2 logit gap per generated token


class PagedEngine:
    def __init__(self, model, paged_attention=reference_paged_attention, num_blocks=128,
                 block_size=16, max_running=4, token_budget=32, on_step=None, attention_layer=None):
        self.model = model
        self.paged_attention = paged_attention
        self.attention_layer = attention_layer
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.max_running = max_running
        self.token_budget = token_budget
        self.on_step = on_step
        self.kv_cache = [np.zeros((2, num_blocks, block_size, model.num_kv_heads, model.head_size),
                                  dtype=np.float32) for _ in range(model.num_layers)]
        self.free_blocks = list(range(num_blocks))

    def _ensure_blocks(self, req, n_tokens):
        need = (n_tokens + self.block_size - 1) // self.block_size - len(req.blocks)
        if need > len(self.free_blocks):
            return False
        for _ in range(need):
            req.blocks.append(self.free_blocks.pop(0))
        return True

    def _schedule(self, running, waiting):
        """Returns [(req, n_new)] for this step, decodes first."""
        budget = self.token_budget
        sched = []
        decodes = [r for r in running if len(r.tokens) - r.num_computed == 1]
        prefills = [r for r in running if len(r.tokens) - r.num_computed > 1]
        for r in decodes + prefills:
            n = min(len(r.tokens) - r.num_computed, budget)
            if n == 0 or not self._ensure_blocks(r, r.num_computed + n):
                continue
            sched.append((r, n))
            budget -= n
        while waiting and budget > 0 and len(running) < self.max_running:
            r = waiting[0]
            n = min(len(r.tokens), budget)
            if not self._ensure_blocks(r, n):
                break
            waiting.pop(0)
            running.append(r)
            sched.append((r, n))
            budget -= n
        return sched

    def generate(self, prompts, max_new_tokens=16):
        """Greedy generation for a list of token-id prompts. Returns (outputs, step_stats):
        outputs[i] is the generated id list of prompts[i]; step_stats is a list of dicts
        (step, num_seqs, num_tokens, num_prefill_tokens, num_decodes, t_attention, t_step, ...),
        also passed to on_step(stats) after every step."""
        waiting = [Request(i, list(p), max_new_tokens, tokens=list(p))
                   for i, p in enumerate(prompts)]
        reqs = list(waiting)
        running, stats = [], []
        step = 0
        while waiting or running:
            t_step = time.perf_counter()
            sched = self._schedule(running, waiting)
            if not sched:
                raise RuntimeError("KV cache too small to make progress")
            B = len(sched)
            ns = np.array([n for _, n in sched], dtype=np.int32)
            qsl = np.zeros(B + 1, dtype=np.int32)
            qsl[1:] = np.cumsum(ns)
            seq_lens = np.array([r.num_computed + n for r, n in sched], dtype=np.int32)
            max_blocks = max(len(r.blocks) for r, _ in sched)
            block_table = np.zeros((B, max_blocks), dtype=np.int32)
            ids, pos, slots = [], [], []
            for b, (r, n) in enumerate(sched):
                block_table[b, :len(r.blocks)] = r.blocks
                p = np.arange(r.num_computed, r.num_computed + n)
                ids.extend(r.tokens[r.num_computed:r.num_computed + n])
                pos.append(p)
                slots.append(block_table[b, p // self.block_size].astype(np.int64)
                             * self.block_size + p % self.block_size)
            pos = np.concatenate(pos)
            slot_mapping = np.concatenate(slots)
            bs = self.block_size
            step_meta = dict(query_start_loc=qsl, seq_lens=seq_lens, block_table=block_table,
                             slot_mapping=slot_mapping, step=step)

            def hook(layer, q, k, v):
                cache = self.kv_cache[layer]
                if self.attention_layer is not None:
                    return self.attention_layer(layer, q, k, v, cache, step_meta)
                cache[0, slot_mapping // bs, slot_mapping % bs] = k
                cache[1, slot_mapping // bs, slot_mapping % bs] = v
                return self.paged_attention(q, cache, qsl, seq_lens, block_table, causal=True)

            # logits only for sequences whose known tokens are all computed after this step
            sample = [b for b, (r, n) in enumerate(sched) if r.num_computed + n == len(r.tokens)]
            timing = {}
            logits = self.model.forward(ids, pos, hook, logits_rows=[qsl[b + 1] - 1 for b in sample],
                                        timing=timing)
            is_decode = [r.num_computed >= len(r.prompt) for r, _ in sched]
            n_prefill = int(sum(n for (r, n), d in zip(sched, is_decode) if not d))
            for b, (r, n) in enumerate(sched):
                r.num_computed += n
            finished = []
            for row, b in enumerate(sample):
                r = sched[b][0]
                lg = logits[row]
                nxt = int(np.argmax(lg))
                top2 = np.partition(lg, -2)[-2:]
                r.margins.append(float(abs(top2[1] - top2[0])))
                r.output.append(nxt)
                r.tokens.append(nxt)
                if len(r.output) >= r.max_new_tokens:
                    finished.append(r)
            for r in finished:
                running.remove(r)
                self.free_blocks.extend(r.blocks)
                r.blocks = []
            st = dict(step=step, num_seqs=B, num_tokens=int(qsl[-1]), num_prefill_tokens=n_prefill,
                      num_decodes=int(sum(is_decode)),
                      request_ids=[r.rid for r, _ in sched], query_lens=ns.tolist(),
                      seq_lens=seq_lens.tolist(), finished=[r.rid for r in finished],
                      t_attention=timing.get("attention", 0.0), t_step=time.perf_counter() - t_step)
            stats.append(st)
            if self.on_step is not None:
                self.on_step(st)
            step += 1
        self.last_requests = reqs
        return [r.output for r in reqs], stats
