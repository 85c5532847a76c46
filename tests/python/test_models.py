"""The main job on real input (skipped cleanly when the model packages are not installed):
- all-MiniLM-L6-v2 embeddings with attn doing every attention call match sentence-transformers
  (fixture), cosine >= 0.9999 per sentence, for the padded-mask path and the varlen path;
- SmolLM2-135M greedy tokens for 8 prompts through the paged engine (continuous batching, chunked
  prefill, attn backend: plan + reshape_and_cache + attn_forward_paged) equal the non-paged reference run
  (fixture) and the same prompts run one at a time, and a non-paged run with attn's dense attention."""

import pytest

from attn_demo import demo

pytestmark = pytest.mark.models


def _need(model):
    miss = demo.missing_packages(model)
    if miss:
        pytest.skip(f"model packages not installed: {', '.join(miss)}")


@pytest.fixture(scope="module")
def minilm():
    _need("minilm")
    from attn_demo.models.minilm import MiniLM

    return MiniLM()


@pytest.fixture(scope="module")
def llama():
    _need("llama")
    from attn_demo.models.llama import LlamaModel

    return LlamaModel()


def test_minilm_embeddings_match_sentence_transformers(minilm, ctx1):
    from attn_demo.models.minilm import cosine

    fx = demo.load_fixture("minilm_embeddings.json")
    assert minilm.tokenize(fx["sentences"]) == fx["token_ids"]
    padded = minilm.encode(fx["sentences"], attention=demo.minilm_attention_padded(ctx1))
    varlen = minilm.encode_varlen(fx["sentences"], attention_varlen=demo.minilm_attention_varlen(ctx1))
    for i, want in enumerate(fx["embeddings"]):
        assert cosine(padded[i], want) >= demo.COSINE_MIN, (i, cosine(padded[i], want))
        assert cosine(varlen[i], want) >= demo.COSINE_MIN, (i, cosine(varlen[i], want))


def test_smollm2_paged_batched_equals_reference_and_one_at_a_time(llama, ctx1):
    fx = demo.load_fixture("llama_greedy.json")
    prompts = [e["prompt_ids"] for e in fx["prompts"]]
    want = [e["generated"] for e in fx["prompts"]]
    n = fx["max_new_tokens"]
    outs, stats, layer = demo.run_paged(llama, prompts, n, max_running=4, token_budget=32, ctx=ctx1)
    # the schedule really exercised continuous batching and chunked prefill
    assert any(s["num_prefill_tokens"] and s["num_decodes"] for s in stats)
    assert max(len(p) for p in prompts) > 32 and len({tuple(s["request_ids"]) for s in stats}) > 2
    assert {"PrefillNoCache", "ChunkedPrefill", "DecodeOnly"} <= set(layer.states)
    assert outs == want
    # one at a time: the longest prompt (chunked over two steps), a chat prompt and the shortest (the
    # demo runs all eight); keeps the suite inside its time budget on a loaded 2-core machine
    for i in (7, 3, 0):
        assert demo.run_paged(llama, [prompts[i]], n, max_running=1, token_budget=32, ctx=ctx1)[0][0] == want[i]


def test_smollm2_non_paged_with_attn_dense(llama, ctx1):
    fx = demo.load_fixture("llama_greedy.json")
    n = 6  # a prefix of the fixture run is enough here; the demo runs all 16 steps
    for e in fx["prompts"][:4]:
        got = llama.generate_reference(e["prompt_ids"], n, attention=demo.llama_attention_dense(ctx1))
        assert got == e["generated"][:n]
