"""vLLM V1's FlashAttention-2 in a step with a prefill chunk: unpacked GQA decodes re-read the KV per query head
(graphsim/serving/mixed_attention.py). Llama-3.1-8B (32 query heads, 8 KV heads, head_dim 128, 32 layers, bf16 KV)
priced on the A100 roofline."""

import numpy as np
import pytest

from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import DERIVED, KernelPricer
from graphsim.serving.engine_versions import parse_engine
from graphsim.serving.mixed_attention import MixedDecode, fa2_applies, mixed_decode
from graphsim.serving.pricing import TreeCost

MiB = 1 << 20
A100_L2 = 40 * MiB  # a100_sxm.json l2_cache_bytes (whitepaper: 40 MB)


def test_a_leaf_re_reads_only_when_the_decodes_kv_of_one_head_spills_l2():
    m = MixedDecode(groups=np.array([1.0, 4.0]), head_token_bytes=np.array([0.0, 512.0]), l2_bytes=A100_L2)
    # 64 decodes x 1280 tokens x 512 B (K + V, 128 + 128 bf16) = 41,943,040 B = 40 MiB: fits (not larger)
    # 64 x 1296 x 512 = 42,467,328 B > 40 MiB: each of the 4 query heads reads it from HBM
    got = m.multipliers(64, np.array([1280.0, 1296.0]))
    np.testing.assert_array_equal(got, [[1.0, 1.0], [1.0, 4.0]])
    # an unknown L2 (0) holds nothing: any context re-reads
    np.testing.assert_array_equal(MixedDecode(m.groups, m.head_token_bytes, 0.0).multipliers(1, np.array([16.0])),
                                  [[1.0], [4.0]])


def test_it_applies_to_vllm_v1_on_compute_capability_8_only():
    a100, h100 = load_hardware("a100"), load_hardware("h100")
    assert fa2_applies(parse_engine("vllm==0.11.0"), a100)
    assert fa2_applies(parse_engine("vllm==0.19.0"), a100)
    assert not fa2_applies(parse_engine("vllm==0.11.0"), h100)  # FA3 packs GQA heads with a paged KV cache
    assert not fa2_applies(parse_engine("vllm==0.6.3"), a100)  # V0: separate prefill and decode calls
    assert not fa2_applies(parse_engine("sglang"), a100)


@pytest.fixture(scope="module")
def a100_cost(llama_tree):
    tree, _, dtypes = llama_tree
    pricer = KernelPricer(None, load_hardware("a100"))
    plain = TreeCost(tree, pricer, dtypes, max_tokens=1600, max_seqs=72, max_context=8192)
    mixed = TreeCost(tree, pricer, dtypes, max_tokens=1600, max_seqs=72, max_context=8192)
    mixed.mixed = mixed_decode(tree, parse_engine("vllm==0.11.0"), load_hardware("a100"), dtypes.kv.element_bytes)
    return plain, mixed


def test_the_llama_tree_gets_four_query_heads_per_kv_head(llama_tree):
    tree, _, dtypes = llama_tree
    m = mixed_decode(tree, parse_engine("vllm==0.11.0"), load_hardware("a100"), dtypes.kv.element_bytes)
    assert m is not None and m.l2_bytes == A100_L2
    on = m.groups > 1
    assert on.sum() == 1 and tree.multiplicity[on].tolist() == [32]  # one FlashAttention leaf, 32 layers
    assert set(m.groups[on].tolist()) == {4.0} and set(m.head_token_bytes[on].tolist()) == {512.0}
    assert mixed_decode(tree, parse_engine("vllm==0.11.0"), load_hardware("h100"), 2.0) is None


def test_a_mixed_step_pays_three_more_kv_reads_when_they_spill(a100_cost):
    plain, mixed = a100_cost
    chunk = [(1500, 0)]
    t0, _ = plain.step_us(1564, 65, 64, 4096.0, chunk)
    t1, s1 = mixed.step_us(1564, 65, 64, 4096.0, chunk)
    # hand-derived: the decodes' KV is 32 layers x 64 x 4096 tokens x 8 heads x 512 B = 34,359,738,368 B, at the
    # A100's 2.039 TB/s 16,851 us; 3 more reads (4 query heads a KV head) = 50,554 us. The roofline's decode
    # attention also reads q and writes o (64 x 4096 x 2 B a layer: 0.05 %), so within 1 %
    assert t1 - t0 == pytest.approx(3 * 34_359_738_368 / 2.039e12 * 1e6, rel=0.01)
    assert s1 >= DERIVED
    # the same, exactly, as the decode-only table x 3
    assert t1 - t0 == pytest.approx(3 * plain.decode_attention(64, 4096.0)[0], rel=1e-9)


def test_no_extra_when_it_fits_in_l2_or_no_chunk_has_more_than_one_token(a100_cost):
    plain, mixed = a100_cost
    # 8 decodes x 4096 x 512 B = 16 MiB of one head's KV: L2 serves the re-reads
    assert mixed.step_us(1508, 9, 8, 4096.0, [(1500, 0)]) == plain.step_us(1508, 9, 8, 4096.0, [(1500, 0)])
    # decode-only steps (FlashDecoding packs the heads) and a "chunk" of one token (max_seqlen_q 1) are not mixed
    assert mixed.step_us(64, 64, 64, 4096.0, []) == plain.step_us(64, 64, 64, 4096.0, [])
    assert mixed.step_us(65, 65, 64, 4096.0, [(1, 100)]) == plain.step_us(65, 65, 64, 4096.0, [(1, 100)])


def test_the_source_split_and_the_meter_add_up_with_mixed_steps(a100_cost):
    plain, mixed = a100_cost
    chunk = [(1500, 2000)]
    t, _ = mixed.step_us(1564, 65, 64, 4096.0, chunk)
    split = mixed.step_split_us(1564, 65, 64, 4096.0, chunk)
    assert split.sum() == pytest.approx(t, rel=1e-9)
    extra = t - plain.step_us(1564, 65, 64, 4096.0, chunk)[0]
    assert split[DERIVED] == pytest.approx(extra, rel=1e-9)  # the added reads are labelled derived
    meter = mixed.meter()
    steps = [(1564, 65, 64, 4096.0, chunk), (64, 64, 64, 4096.0, []), (1508, 9, 8, 4096.0, [(1500, 0)])]
    total = 0.0
    for st in steps:
        us, src = mixed.step_us(*st)
        meter.step(us, src, *st)
        total += us
    assert meter.source_us().sum() == pytest.approx(total, rel=1e-9)


def test_the_search_fast_path_prices_a_mixed_step_as_the_simulator_does(a100_cost):
    from graphsim.serving.steady import _Timer

    plain, mixed = a100_cost
    step = (1564, 65, 64, 4096.0, [(1500, 0)])
    assert _Timer(mixed).gpu(*step) == pytest.approx(mixed.step_us(*step)[0] * 1e-6, rel=1e-12)
    assert _Timer(mixed).gpu(*step) > _Timer(plain).gpu(*step)
    assert _Timer(mixed).split(*step).sum() == pytest.approx(1.0)
