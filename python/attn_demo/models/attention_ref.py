"""NumPy reference attention (float64 inside) in the three calling conventions the models use.

All entry points use softmax scale 1/sqrt(head_size) unless `scale` is given, support GQA
(num_q_heads a multiple of num_kv_heads; q head h reads kv head h // (Hq // Hkv)) and,
when causal, align the diagonal bottom-right (query i of a sequence with q_len queries and
k_len keys sees keys j <= i + k_len - q_len), as flash-attn / vLLM do.
"""

import numpy as np


def _attend(q, k, v, causal, scale, key_mask=None):
    """q [Tq,Hq,D], k/v [Tk,Hkv,D] -> out [Tq,Hq,D] float32; float64 inside."""
    tq, hq, d = q.shape
    tk, hkv, _ = k.shape
    if scale is None:
        scale = 1.0 / np.sqrt(d)
    g = hq // hkv
    q64 = q.astype(np.float64).reshape(tq, hkv, g, d)
    k64 = k.astype(np.float64)
    v64 = v.astype(np.float64)
    s = np.einsum("qhgd,khd->hgqk", q64, k64) * scale  # [Hkv,G,Tq,Tk]
    allowed = np.ones((tq, tk), dtype=bool)
    if causal:
        allowed &= np.arange(tk)[None, :] <= np.arange(tq)[:, None] + (tk - tq)
    if key_mask is not None:
        allowed &= key_mask[None, :]
    s = np.where(allowed, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    den = p.sum(axis=-1, keepdims=True)
    p = p / np.where(den > 0, den, 1.0)  # fully masked rows -> zeros
    o = np.einsum("hgqk,khd->qhgd", p, v64)
    return o.reshape(tq, hq, d).astype(np.float32)


def reference_attention(q, k, v, key_padding_mask=None, causal=False, scale=None):
    """Padded batch, BSND. q [B,Sq,Hq,D], k/v [B,Sk,Hkv,D], key_padding_mask [B,Sk] bool
    (True = keep). Returns [B,Sq,Hq,D] float32."""
    out = np.empty(q.shape, dtype=np.float32)
    for b in range(q.shape[0]):
        km = None if key_padding_mask is None else np.asarray(key_padding_mask[b], dtype=bool)
        out[b] = _attend(q[b], k[b], v[b], causal, scale, km)
    return out


def reference_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal=False, scale=None):
    """Packed varlen (flash_attn_varlen_func convention). q [Tq,Hq,D], k/v [Tk,Hkv,D],
    cu_seqlens_* int32 [B+1]. Returns [Tq,Hq,D] float32."""
    out = np.empty(q.shape, dtype=np.float32)
    for b in range(len(cu_seqlens_q) - 1):
        qs, qe = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
        ks, ke = int(cu_seqlens_k[b]), int(cu_seqlens_k[b + 1])
        if qe > qs:
            out[qs:qe] = _attend(q[qs:qe], k[ks:ke], v[ks:ke], causal, scale)
    return out


def reference_paged_attention(q, kv_cache, query_start_loc, seq_lens, block_table,
                              causal=True, scale=None):
    """Paged KV (vLLM convention). q [T,Hq,D] packed new tokens; kv_cache
    [2,num_blocks,block_size,Hkv,D]; query_start_loc int32 [B+1]; seq_lens int32 [B] (context
    length including this step's tokens); block_table int32 [B,max_blocks]. The new tokens'
    K/V must already be written into the cache. Returns [T,Hq,D] float32."""
    _, _, bs, hkv, d = kv_cache.shape
    out = np.empty(q.shape, dtype=np.float32)
    for b in range(len(seq_lens)):
        qs, qe = int(query_start_loc[b]), int(query_start_loc[b + 1])
        n = int(seq_lens[b])
        if qe == qs:
            continue
        nblk = (n + bs - 1) // bs
        blocks = block_table[b, :nblk]
        k = kv_cache[0, blocks].reshape(-1, hkv, d)[:n]
        v = kv_cache[1, blocks].reshape(-1, hkv, d)[:n]
        out[qs:qe] = _attend(q[qs:qe], k, v, causal, scale)
    return out
