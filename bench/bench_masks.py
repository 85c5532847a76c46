"""Dense attention with a key padding, keep or additive mask against the same call on the visible keys only.

Usage: python3 bench/bench_masks.py [reps]   (one thread; min over reps; ATTN_LIBRARY / PYTHONPATH as bench/README.md)

Each row: B = 2, 8 heads x 64, float32, the first `visible` keys of every batch row kept and the rest hidden by
the mask ([B, Sk] key_padding_mask, a [B, 1, Sq, Sk] bool view, a [B, 1, 1, Sk] additive float mask with -inf).
The ratio is the masked call's time over the call on the visible keys alone; "bitwise" says whether the two
outputs have the same bits (they do when the visible keys end on a tile boundary and the tiles line up)."""
import sys, time
import numpy as np
import attn

def best(f, reps):
    f()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter(); f(); t.append(time.perf_counter() - t0)
    return min(t) * 1e3

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 5
attn.set_num_threads(1)
rng = np.random.default_rng(0)
B, H, D = 2, 8, 64
for Sq, Sk, vis in [(1024, 1024, 512), (4096, 256, 77), (1024, 2048, 1024)]:
    q = rng.standard_normal((B, Sq, H, D), dtype=np.float32)
    k = rng.standard_normal((B, Sk, H, D), dtype=np.float32)
    v = rng.standard_normal((B, Sk, H, D), dtype=np.float32)
    kpm = np.zeros((B, Sk), bool); kpm[:, :vis] = True
    keep = np.broadcast_to(kpm[:, None, None, :], (B, 1, Sq, Sk))
    add = np.where(kpm, 0.0, -np.inf).astype(np.float32)[:, None, None, :]
    kv, vv = np.ascontiguousarray(k[:, :vis]), np.ascontiguousarray(v[:, :vis])
    ref = attn.attention(q, kv, vv)
    t_vis = best(lambda: attn.attention(q, kv, vv), reps)
    for name, kw in [("key_padding_mask", dict(key_padding_mask=kpm)), ("bool mask", dict(mask=keep)),
                     ("additive mask", dict(mask=add))]:
        out = attn.attention(q, k, v, **kw)
        assert np.abs(out - ref).max() < 1e-5, name
        t = best(lambda: attn.attention(q, k, v, **kw), reps)
        print(f"Sq {Sq} Sk {Sk} visible {vis}: {name:17s} {t:8.2f} ms  visible-only {t_vis:8.2f} ms  ratio {t / t_vis:5.2f}"
              f"  bitwise {np.array_equal(out, ref)}")
