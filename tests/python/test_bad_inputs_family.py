"""Bad inputs through the public Python functions give one exception family.

Every case below is a wrong dtype, a non-contiguous array where the C library needs a contiguous last
dimension, a list where an array is needed (an output, or an input whose values become float64), a read-only
output or cache, or a wrong shape. Each runs through the compiled binding attn._ext (the only one), which must
raise an attn.AttnError subclass (AttnInvalidArgumentError, a ValueError; AttnTypeError for a wrong type or dtype, also
a TypeError) with the same text, whose ``message`` has the C library's style "<argument>: <what is wrong>"
(e.g. "out: array is read-only", "valid_kv_length=8 is outside 0..seq_k=7"), and must leave every output and cache as it was.
"""

import re

import numpy as np
import pytest

import attn
from attn import _binding, diffusion

EXT = _binding.ext
D = 16

# "<argument>: <problem>" or "<argument>=<value> <problem>": the argument is a name with optional [index] /
# .field parts (C's style: "q: ...", "params.mask: ...", "block_table: entry [0][1] = 9 ...",
# "valid_kv_length=8 is outside 0..seq_k=7").
MESSAGE_STYLE = re.compile(r"^[A-Za-z_][\w.\[\]]*(: |=)\S")


def _qkv(b=1, sq=5, sk=7, h=2, hkv=2, d=D, dtype=np.float32):
    rng = np.random.default_rng(11)
    q = rng.standard_normal((b, sq, h, d)).astype(dtype)
    k = rng.standard_normal((b, sk, hkv, d)).astype(dtype)
    v = rng.standard_normal((b, sk, hkv, d)).astype(dtype)
    return q, k, v


def _ro(a):
    a = np.array(a)
    a.setflags(write=False)
    return a


def _cases():
    """name -> (function of the watched buffers, watched buffers factory, expected class, message regex)."""
    q, k, v = _qkv()
    cases = {}

    def add(name, make, call, exc, msg):
        cases[name] = (make, call, exc, msg)

    def dense_out():
        return {"out": np.full((1, 5, 2, D), 7.0, np.float32)}

    # -- wrong dtypes ------------------------------------------------------------------------------------
    add("dense_q_float64", dense_out, lambda w: attn.attention(q.astype(np.float64), k, v, out=w["out"]),
        TypeError, r"^q: dtype float64")
    add("dense_q_complex", dense_out, lambda w: attn.attention(q.astype(np.complex64), k, v, out=w["out"]),
        TypeError, r"^q: dtype complex64")
    add("dense_k_int32", dense_out, lambda w: attn.attention(q, k.astype(np.int32), v, out=w["out"]),
        ValueError, r"^k: dtype i32, expected f32, f16 or bf16")
    add("flash_v_uint16", lambda: {}, lambda w: attn.flash_attn_func(q, k, v.astype(np.uint16)),
        TypeError, r"^v: dtype uint16")
    add("dense_out_float64", lambda: {"out": np.full((1, 5, 2, D), 7.0)},
        lambda w: attn.attention(q, k, v, out=w["out"]), TypeError, r"^out: dtype float64")
    add("varlen_cu_float", lambda: {},
        lambda w: attn.flash_attn_varlen_func(q[0], k[0], v[0], np.array([0.0, 5.0], np.float32),
                                              np.array([0, 7], np.int32), 5, 7),
        TypeError, r"^cu_seqlens_q: expected an integer array, got dtype float32")
    add("padded_mask_float", lambda: {},
        lambda w: diffusion.forward_padded(q, q, q, np.ones((1, 5), np.float32)),
        ValueError, r"^key_padding_mask: dtype f32, expected bool or u8")
    add("copy_blocks_float_mapping", lambda: {"kv": np.zeros((2, 4, 4, 2, D), np.float32)},
        lambda w: attn.copy_blocks(w["kv"], np.array([[0.0, 1.0]], np.float32)),
        TypeError, r"^block_mapping: expected an integer array, got dtype float32")

    # -- non-contiguous where the last dimension must be contiguous ---------------------------------------
    wide = np.repeat(q, 2, axis=3)
    add("flash_q_strided_last_dim", lambda: {}, lambda w: attn.flash_attn_func(wide[..., ::2], k, v),
        ValueError, r"^q: strides\[3\]=2.*contiguous")
    add("dense_out_strided_last_dim", lambda: {"big": np.full((1, 5, 2, 2 * D), 7.0, np.float32)},
        lambda w: attn.attention(q, k, v, out=w["big"][..., ::2]), ValueError, r"^out: strides\[3\]=2.*contiguous")
    add("dense_q_negative_stride", dense_out, lambda w: attn.attention(q[:, ::-1], k, v, out=w["out"]),
        ValueError, r"^q: stride\[1\]=-\d+ bytes is negative")
    key = np.random.default_rng(3).standard_normal((3, 2, 2 * D)).astype(np.float32)
    add("reshape_key_strided", lambda: {"kv": np.zeros((2, 4, 4, 2, D), np.float32)},
        lambda w: attn.reshape_and_cache(key[..., ::2], key[..., ::2], w["kv"], np.array([0, 1, 2], np.int64)),
        ValueError, r"^key: strides\[2\]=2.*contiguous")

    # -- lists instead of arrays ---------------------------------------------------------------------------
    add("dense_out_list", lambda: {}, lambda w: attn.attention(q, k, v, out=np.zeros((1, 5, 2, D)).tolist()),
        TypeError, r"^out: expected a writable array .* got list")
    add("dense_q_list", dense_out, lambda w: attn.attention(q.tolist(), k, v, out=w["out"]),
        TypeError, r"^q: dtype float64")
    add("reshape_cache_list", lambda: {},
        lambda w: attn.reshape_and_cache(key[..., :D].copy(), key[..., :D].copy(),
                                         np.zeros((2, 4, 4, 2, D), np.float32).tolist(),
                                         np.array([0, 1, 2], np.int64)),
        TypeError, r"^kv_cache: expected a writable array .* got list")
    add("merge_lse_list_of_floats", lambda: {},
        lambda w: attn.merge_attn_states(q[0], [[0.0] * 5] * 2, q[0], np.zeros((2, 5), np.float32)),
        TypeError, r"^lse_a: dtype float64")
    add("varlen_cu_list_non_integer", lambda: {},
        lambda w: attn.flash_attn_varlen_func(q[0], k[0], v[0], [0, 2.5], [0, 7], 5, 7),
        TypeError, r"^cu_seqlens_q: expected an integer array, got dtype float64")
    add("paged_block_table_list_out_of_range", lambda: {},
        lambda w: attn.paged_attention(q[0, :1], np.zeros((2, 4, 4, 2, D), np.float32), [0, 1], [3], [[9]]),
        ValueError, r"^block_table: entry \[0\]\[0\] = 9")

    # -- read-only outputs and caches ----------------------------------------------------------------------
    add("dense_out_read_only", lambda: {"out": _ro(np.full((1, 5, 2, D), 7.0, np.float32))},
        lambda w: attn.attention(q, k, v, out=w["out"]), ValueError, r"^out: array is read-only")
    add("dense_lse_read_only", lambda: {"lse": _ro(np.zeros((1, 2, 5), np.float32))},
        lambda w: attn.attention(q, k, v, lse=w["lse"]), ValueError, r"^lse: array is read-only")
    add("merge_out_read_only", lambda: {"out": _ro(np.full((5, 2, D), 7.0, np.float32))},
        lambda w: attn.merge_attn_states(q[0], np.zeros((2, 5), np.float32), q[0], np.zeros((2, 5), np.float32),
                                         out=w["out"]),
        ValueError, r"^out: array is read-only")
    add("reshape_cache_read_only", lambda: {"kv": _ro(np.zeros((2, 4, 4, 2, D), np.float32))},
        lambda w: attn.reshape_and_cache(key[..., :D].copy(), key[..., :D].copy(), w["kv"],
                                         np.array([0, 1, 2], np.int64)),
        ValueError, r"^kv_cache: array is read-only")

    # -- wrong shapes (found by the C validation: the message is libattn's own) ------------------------------
    add("dense_out_wrong_shape", lambda: {"out": np.full((1, 5, 2, D + 1), 7.0, np.float32)},
        lambda w: attn.attention(q, k, v, out=w["out"]), ValueError, r"^out: shape\[3\]=17, expected head_size_v=16")
    add("dense_gqa_not_dividing", dense_out,
        lambda w: attn.attention(np.zeros((1, 5, 3, D), np.float32), k, v), ValueError, r"num_kv_heads|num_heads")
    add("dense_q_ndim3", lambda: {}, lambda w: attn.attention(q[0], k, v), ValueError, r"^q: ndim=3")
    add("merge_lse_shape", lambda: {"out": np.full((5, 2, D), 7.0, np.float32)},
        lambda w: attn.merge_attn_states(q[0], np.zeros((2, 4), np.float32), q[0], np.zeros((2, 5), np.float32),
                                         out=w["out"]),
        ValueError, r"^lse_a: shape")
    add("kv_prefix_past_seq_k", lambda: {}, lambda w: diffusion.forward_kv_prefix(q, k, v, 8),
        ValueError, r"^valid_kv_length=8 is outside 0..seq_k=7")
    return cases


CASES = _cases()
BINDINGS = ["ext"]


def _run(monkeypatch, name, binding):
    make, call, exc, msg = CASES[name]
    watched = make()
    before = {key: np.array(a, copy=True) for key, a in watched.items()}
    with pytest.raises(attn.AttnError) as info:
        call(watched)
    e = info.value
    assert isinstance(e, attn.AttnInvalidArgumentError) and isinstance(e, exc), (binding, type(e), e)
    assert e.status_name == "ATTN_STATUS_INVALID_ARGUMENT"
    assert MESSAGE_STYLE.match(e.message), f"{binding}: message {e.message!r} is not '<argument>: <problem>'"
    assert re.search(msg, e.message), f"{binding}: {e.message!r} does not match {msg!r}"
    assert str(e).endswith(e.message)
    for key, a in watched.items():  # nothing written on failure
        np.testing.assert_array_equal(np.asarray(a), before[key], err_msg=f"{binding}: {key} was written")
    return type(e), str(e), e.message


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("binding", BINDINGS)
def test_bad_input_raises_the_family(monkeypatch, name, binding):
    _run(monkeypatch, name, binding)


def test_every_kind_is_covered():
    """The issue's kinds each have cases (so this file cannot silently shrink to nothing)."""
    kinds = {"dtype": ("float64", "complex", "int32", "uint16", "float", "mask_float"),
             "contiguity": ("strided", "negative_stride"), "list": ("list",), "read_only": ("read_only",),
             "shape": ("shape", "ndim", "dividing", "past")}
    for kind, words in kinds.items():
        assert sum(any(w in n for w in words) for n in CASES) >= 2, kind
    assert len(CASES) >= 25
