"""Composite MLA rows: a block priced by one measured module row where the profile has one, by its kernels
otherwise (torch-free: the graph is built by hand)."""

import math

import numpy as np
import pytest

from graphsim.costing.composite import (
    COMPOSITE_MLA, composite_note, context_attention_rate, graph_mla_blocks, mla_block,
)
from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import build_tree, compile_tree
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import DERIVED, INTERPOLATED, MEASURED, ROOFLINE, KernelPricer
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import (
    AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, Measurement, MlaModuleDecodeKey,
    MlaModulePrefillKey,
)
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.ir import DType, Graph, LayerSchedule, Node, Op, T, TensorSpec
from graphsim.ir.geometry import AttentionGeometry, CollectiveGeometry, GemmGeometry, NormGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import SeqGroup, Step

# A small MLA layer: hidden 64, q LoRA rank 32, kv LoRA rank 16, 2 heads of nope 16 + rope 8 (q/k 24), v 16.
MLA = AttentionGeometry(num_heads=2, num_kv_heads=2, head_dim=24, v_head_dim=16, window=0, causal=True,
                        kv_lora_rank=16, qk_rope_head_dim=8)
ATTN = "m.layers.0.self_attn"
# its module rows' key: heads 2, kv_lora 16, nope 24 - 8 = 16, rope 8, v 16, bf16, bf16 KV, hidden 64, q_lora 32
DECODE = MlaModuleDecodeKey(2, 16, 16, 8, 16, D.BF16, D.BF16, 64, 32, D.BF16)
PREFILL = MlaModulePrefillKey(2, 16, 16, 8, 16, D.BF16, D.BF16, 64, 32, D.BF16)


def _graph() -> Graph:
    x = TensorSpec((1, T, 64), DType.BFLOAT16)

    def k(name, kind, kname, geo, scope, *inputs, rows=Rows.TOKENS):
        return Node(name, Op.KERNEL, inputs, (x,), KernelAttrs(kind, kname, geo, "bf16", rows), scope=scope, layer=0)

    g = Graph("toy-mla", inputs={"h": x})
    g.nodes = [
        k("L0.norm", KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=64, dim=64), "m.layers.0.input_layernorm", "h"),
        k("L0.qkv_a", KernelKind.GEMM, "fused_qkv_a_proj", GemmGeometry(n=32 + 16 + 8, k=64), ATTN, "L0.norm"),
        k("L0.q_norm", KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=32, dim=32), f"{ATTN}.q_a_layernorm",
          "L0.qkv_a"),
        k("L0.q_b", KernelKind.GEMM, "q_b_proj", GemmGeometry(n=2 * 24, k=32), f"{ATTN}.q_b_proj", "L0.q_norm"),
        k("L0.kv_norm", KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=16, dim=16), f"{ATTN}.kv_a_layernorm",
          "L0.qkv_a"),
        k("L0.kv_b", KernelKind.GEMM, "kv_b_proj", GemmGeometry(n=2 * 32, k=16), f"{ATTN}.kv_b_proj", "L0.kv_norm"),
        k("L0.attn", KernelKind.ATTENTION, "mla_attention", MLA, ATTN, "L0.q_b", "L0.kv_b", rows=Rows.NONE),
        k("L0.o_proj", KernelKind.GEMM, "o_proj", GemmGeometry(n=64, k=2 * 16), f"{ATTN}.o_proj", "L0.attn"),
        k("L0.ar", KernelKind.ALL_REDUCE, "all_reduce",
          CollectiveGeometry(num_gpus=2, group="tp", width=64, bytes_per_row=128, reason="row_parallel"),
          f"{ATTN}.o_proj", "L0.o_proj"),
        k("L0.mlp", KernelKind.GEMM, "down_proj", GemmGeometry(n=64, k=64), "m.layers.0.mlp.down_proj", "L0.ar"),
    ]
    g.outputs = ["L0.mlp"]
    g.schedule = LayerSchedule(("a", "a"), {"a": 0})
    g.meta.fuse_target = "vllm"  # the module rows time vLLM's module: only a graph fused for vLLM gets them
    g.verify()
    return g


@pytest.fixture()
def profile(tmp_path):
    with ProfileDB.create(tmp_path / "mla.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([
            (DECODE, AttentionDecodePoint(4, 128), Measurement(100.0)),
            (DECODE, AttentionDecodePoint(4, 512), Measurement(144.0)),
            (PREFILL, AttentionPrefillPoint(1, 1, 1), Measurement(50.0)),
            (PREFILL, AttentionPrefillPoint(1, 16, 16), Measurement(116.0)),
            (PREFILL, AttentionPrefillPoint(1, 32, 32), Measurement(110.0)),
            (PREFILL, AttentionPrefillPoint(1, 64, 64), Measurement(130.0)),
            (PREFILL, AttentionPrefillPoint(1, 192, 192), Measurement(240.0)),
            (PREFILL, AttentionPrefillPoint(1, 256, 256), Measurement(300.0)),
        ])
    return ProfileDB.open(tmp_path / "mla.db")


@pytest.fixture()
def decode_only(tmp_path):
    with ProfileDB.create(tmp_path / "mla_decode.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(DECODE, AttentionDecodePoint(4, 128), Measurement(100.0))])
    return ProfileDB.open(tmp_path / "mla_decode.db")


def test_block_is_the_attention_scope_without_its_collective():
    b = mla_block(_graph().nodes, Dtypes(), None)
    assert b is not None
    # the input norm, the TP all-reduce and the MLP are not part of the measured module
    assert b.part_names == ("L0.qkv_a", "L0.q_norm", "L0.q_b", "L0.kv_norm", "L0.kv_b", "L0.attn", "L0.o_proj")
    # hidden = o_proj's n (64); q LoRA rank = the norm that is not kv_lora_rank wide (32)
    assert (b.hidden_size, b.q_lora_rank) == (64, 32)
    assert b.keys(Dtypes()) == (DECODE, PREFILL)


def test_composite_leaf_priced_by_module_rows(profile):
    cm = CostModel.of_kernel_graph(_graph(), None, profile)
    names = [(leaf.name, leaf.attrs.name) for leaf in cm.tree.leaves]
    assert names == [("L0.norm", "rms_norm"), ("L0.attn", COMPOSITE_MLA), ("L0.ar", "all_reduce"),
                     ("L0.mlp", "down_proj")]
    steps = [Step((SeqGroup(1, 127, 4),)), Step((SeqGroup(1, 255, 4),)), Step((SeqGroup(256, 0, 1),))]
    ev = cm.evaluate(steps)
    # decode 4 × kv 128: the row, 100 µs; kv 256 lies halfway between 128 and 512 in log space, so the
    # log-log interpolation is the geometric mean √(100 × 144) = 120 µs; prefill 1 × 256: the row, 300 µs
    assert ev.leaf_time_us[1] == pytest.approx([100.0, 120.0, 300.0])
    assert list(ev.leaf_source[1]) == [MEASURED, INTERPOLATED, MEASURED]
    assert "mla_module rows (decode/prefill) replace" in cm.data_note


def test_a_graph_not_fused_for_vllm_keeps_its_kernels(profile):
    g = _graph()
    g.meta.fuse_target = "eager"
    cm = CostModel.of_kernel_graph(g, None, profile)
    assert [leaf.name for leaf in cm.tree.leaves] == [n.name for n in g.nodes] and "mla_module" not in cm.data_note


def test_without_rows_the_block_is_priced_by_its_kernels():
    g = _graph()
    cm = CostModel.of_kernel_graph(g, load_hardware("h200"), None)
    assert [leaf.name for leaf in cm.tree.leaves] == [n.name for n in g.nodes]
    assert "priced by their kernels" in cm.data_note and "hidden=64 q_lora_rank=32" in cm.data_note
    assert composite_note(graph_mla_blocks(g, Dtypes(), lambda key: False), Dtypes()) == cm.data_note


def _kernel_times(g: Graph, pricer: KernelPricer, dt: Dtypes, step: Step) -> dict[str, float]:
    """Each kernel of the graph priced on its own (no composite) for one step."""
    parts = compile_tree(build_tree(g))
    ev = parts.evaluate([step], pricer, dt)
    return {leaf.name: float(ev.leaf_time_us[i, 0]) for i, leaf in enumerate(parts.leaves)}


def test_prefill_after_a_cached_prefix_is_the_difference_of_two_module_rows(profile):
    # vLLM's MLA prefill of 64 new tokens after 192 cached (MLACommonImpl._forward_prefill and
    # _compute_prefill_context): the projections of the 64 tokens and their attention to 256 positions, which is
    # the module row at 256 less the row at 192 (300 - 240 = 60 µs, both measured), plus the module's fixed cost,
    # its row at 1 token (50 µs), plus kv_b_proj up-projecting the 192 cached latents (one GEMM of m = 192, priced
    # as that kernel on its own): 110 µs + kv_b. The floor is the 64-token row without a prefix (130 µs) plus what the
    # chunk runs beyond it, kv_b and its attention over the 192 cached keys at the fastest attention rate measured on
    # the GPU; this profile has no attention rows, so at the H200's bf16 dense peak (989.5 TFLOP/s):
    # 2 · 1 · 2 heads · 64 · 192 · (24 + 16) = 1,966,080 FLOPs = 0.001987 µs. The floor binds: 130 + kv_b + 0.002
    hw = load_hardware("h200")
    g = _graph()
    dt = Dtypes()
    pricer = KernelPricer(profile, hw)
    whole = compile_tree(build_tree(g, dt, lambda key: pricer.curve(key) is not None))
    chunk = Step((SeqGroup(64, 192, 1),))
    mixed = Step((SeqGroup(1, 127, 4), SeqGroup(64, 192, 1)))
    ev = whole.evaluate([chunk, mixed], pricer, dt)
    comp = next(i for i, leaf in enumerate(whole.leaves) if leaf.block is not None)
    kv_b_192 = _kernel_times(g, pricer, dt, Step((SeqGroup(192, 0, 1),)))["L0.kv_b"]
    assert 0 < kv_b_192 < 20
    by_rows = 300.0 - 240.0 + 50.0 + kv_b_192
    ctx = 1_966_080 / 989.5e6
    assert ev.leaf_time_us[comp, 0] == pytest.approx(max(by_rows, 130.0 + kv_b_192 + ctx))
    assert ev.leaf_time_us[comp, 0] == pytest.approx(130.0 + kv_b_192 + ctx)
    # mixed step: the decode group from its row (4 × kv 128: 100 µs) plus the chunk, floored as a whole at the
    # decode row plus the chunk's floor: max(100 + 110 + kv_b, 100 + 130 + kv_b + 0.002)
    assert ev.leaf_time_us[comp, 1] == pytest.approx(230.0 + kv_b_192 + ctx)


def test_a_long_prefix_prices_above_the_floor(profile, tmp_path):
    # 64 new tokens after 192 cached where the chunk without a prefix is cheap: with the row at 64 tokens at 90 µs
    # the floor binds nothing, and the chunk is 300 - 240 + 50 + kv_b(192) exactly
    hw = load_hardware("h200")
    g, dt = _graph(), Dtypes()
    pricer = KernelPricer(profile, hw)
    with ProfileDB.create(tmp_path / "low.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(PREFILL, AttentionPrefillPoint(1, q, q), Measurement(us))
                      for q, us in ((1, 50.0), (64, 90.0), (192, 240.0), (256, 300.0))])
    low = KernelPricer(ProfileDB.open(tmp_path / "low.db"), hw)
    whole = compile_tree(build_tree(g, dt, lambda key: low.curve(key) is not None))
    ev = whole.evaluate([Step((SeqGroup(64, 192, 1),))], low, dt)
    comp = next(i for i, leaf in enumerate(whole.leaves) if leaf.block is not None)
    kv_b_192 = _kernel_times(g, pricer, dt, Step((SeqGroup(192, 0, 1),)))["L0.kv_b"]
    assert ev.leaf_time_us[comp, 0] == pytest.approx(300.0 - 240.0 + 50.0 + kv_b_192)


def test_short_noisy_rows_never_price_a_chunk_below_its_own_row(profile):
    # 16 new tokens after 16 cached: the rows at 32 (110 µs) and 16 (116 µs) are out of order, as short measured
    # rows are (H200 DeepSeek-R1 TP 8: 116.3 µs at 16 tokens, 109.7 at 32); the difference 110 - 116 + 50 = 44 µs
    # (+ kv_b of 16 latents) is below the floor: the chunk's own row without a prefix, 116 µs, + kv_b of the 16
    # latents + its attention over them at the bf16 peak, 2 · 2 · 16 · 16 · 40 = 40,960 FLOPs / 989.5e6 per µs
    hw = load_hardware("h200")
    g, dt = _graph(), Dtypes()
    pricer = KernelPricer(profile, hw)
    whole = compile_tree(build_tree(g, dt, lambda key: pricer.curve(key) is not None))
    ev = whole.evaluate([Step((SeqGroup(16, 16, 1),))], pricer, dt)
    comp = next(i for i, leaf in enumerate(whole.leaves) if leaf.block is not None)
    kv_b_16 = _kernel_times(g, pricer, dt, Step((SeqGroup(16, 0, 1),)))["L0.kv_b"]
    assert ev.leaf_time_us[comp, 0] == pytest.approx(116.0 + kv_b_16 + 40_960 / 989.5e6)


def test_two_sequences_after_a_prefix_use_the_batch_rows(profile, tmp_path):
    # two identical chunks (count 2) are priced at batch 2 of the module rows, and the up-projection covers
    # both sequences' cached latents (m = 2 × 192 = 384)
    hw = load_hardware("h200")
    with ProfileDB.create(tmp_path / "b2.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(PREFILL, AttentionPrefillPoint(2, 1, 1), Measurement(60.0)),
                     (PREFILL, AttentionPrefillPoint(2, 64, 64), Measurement(150.0)),
                     (PREFILL, AttentionPrefillPoint(2, 192, 192), Measurement(410.0)),
                     (PREFILL, AttentionPrefillPoint(2, 256, 256), Measurement(530.0))])
    pricer = KernelPricer(ProfileDB.open(tmp_path / "b2.db"), hw)
    g, dt = _graph(), Dtypes()
    whole = compile_tree(build_tree(g, dt, lambda key: pricer.curve(key) is not None))
    ev = whole.evaluate([Step((SeqGroup(64, 192, 2),))], pricer, dt)
    comp = next(i for i, leaf in enumerate(whole.leaves) if leaf.block is not None)
    kv_b_384 = _kernel_times(g, pricer, dt, Step((SeqGroup(384, 0, 1),)))["L0.kv_b"]
    # 530 - 410 + 60 = 180 µs + kv_b, above the batch-2 row at 64 tokens (150 µs)
    assert ev.leaf_time_us[comp, 0] == pytest.approx(530.0 - 410.0 + 60.0 + kv_b_384)


def test_without_prefill_rows_a_chunk_after_a_prefix_is_priced_by_the_kernels(decode_only):
    # no module prefill rows: the chunk is priced by the block's kernels, inside the composite leaf
    hw = load_hardware("h200")
    g = _graph()
    dt = Dtypes()
    pricer = KernelPricer(decode_only, hw)
    whole = compile_tree(build_tree(g, dt, lambda key: pricer.curve(key) is not None))
    chunk = Step((SeqGroup(64, 192, 1),))
    mixed = Step((SeqGroup(1, 127, 4), SeqGroup(64, 192, 1)))
    ev_whole = whole.evaluate([chunk, mixed], pricer, dt)
    comp, blk = next((i, leaf.block) for i, leaf in enumerate(whole.leaves) if leaf.block is not None)
    times = _kernel_times(g, pricer, dt, chunk)
    by_parts = sum(times[name] for name in blk.part_names)
    assert ev_whole.leaf_time_us[comp, 0] == pytest.approx(by_parts)
    # mixed step: the decode group from its row (100 µs) plus the chunk by the kernels
    assert ev_whole.leaf_time_us[comp, 1] == pytest.approx(100.0 + by_parts)
    assert math.isfinite(float(np.sum(ev_whole.total_us())))


def test_analyzer_sites_keep_naming_the_kernels_of_a_composite(profile):
    # the analyzer's location maps name kernels: a composite leaf gives one site per kernel it covers, whose
    # times add up to the composite's (the 100 µs row at 4 × kv 128, ×2 layers = 200 µs)
    from graphsim.analysis.sites import read_sites

    hw = load_hardware("h200")
    cm = CostModel.of_kernel_graph(_graph(), hw, profile)
    step = Step((SeqGroup(1, 127, 4),))
    ev = cm.evaluate([step])
    sites = read_sites(cm.graph, cm.tree, ev, step, cm.dtypes, hw)
    kernels = [s.kernel for s in sites]
    assert kernels == ["rms_norm", "fused_qkv_a_proj", "rms_norm", "q_b_proj", "rms_norm", "kv_b_proj",
                       "mla_attention", "o_proj", "all_reduce", "down_proj"]
    block = sites[1:8]
    assert sum(s.time_us or 0.0 for s in block) == pytest.approx(200.0)
    assert all(s.source == "measured" and "of the composite: mla_module time" in s.notes[0] for s in block)


def test_a_chunk_after_a_prefix_is_never_faster_than_the_gpus_fastest_attention(profile, tmp_path):
    # The same module rows as `profile` (1: 50, 64: 130, 192: 240, 256: 300 µs) plus three attention prefill rows
    # (1 head, 1 KV head, head dim 8; FLOPs = 2 · pairs · (8 + 8), causal pairs q(q + 1)/2):
    #   (1, 64, 64) in 66.56 µs: 2 · 2,080 · 16 = 66,560 FLOPs → 1,000 FLOPs/µs, the fastest full-attention row;
    #   (1, 32, 32) in 100 µs: 2 · 528 · 16 = 16,896 FLOPs → 169 FLOPs/µs;
    #   a sliding-window key (window 16) at (1, 64, 64) in 0.01 µs, which is not full attention and is left out.
    # 64 new tokens after 192 cached: the n · p attention over the cached keys is 2 · 1 · 2 heads · 64 · 192 ·
    # (24 + 16) = 1,966,080 FLOPs → 1,966.08 µs at 1,000 FLOPs/µs; the floor is the 64-token row (130) + kv_b of the
    # 192 latents + 1,966.08, far above the rows' difference 300 - 240 + 50 + kv_b; labelled with the worst source of
    # the floor's parts: kv_b has no GEMM rows here (roofline), the attention term is derived
    hw = load_hardware("h200")
    g, dt = _graph(), Dtypes()
    slow = AttentionPrefillKey(1, 1, 8, D.BF16, D.BF16, 0)
    windowed = AttentionPrefillKey(1, 1, 8, D.BF16, D.BF16, 16)
    with ProfileDB.create(tmp_path / "attn.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(PREFILL, AttentionPrefillPoint(1, q, q), Measurement(us))
                     for q, us in ((1, 50.0), (64, 130.0), (192, 240.0), (256, 300.0))]
                    + [(slow, AttentionPrefillPoint(1, 64, 64), Measurement(66.56)),
                       (slow, AttentionPrefillPoint(1, 32, 32), Measurement(100.0)),
                       (windowed, AttentionPrefillPoint(1, 64, 64), Measurement(0.01))])
    pricer = KernelPricer(ProfileDB.open(tmp_path / "attn.db"), hw)
    whole = compile_tree(build_tree(g, dt, lambda key: pricer.curve(key) is not None))
    ev = whole.evaluate([Step((SeqGroup(64, 192, 1),)), Step((SeqGroup(64, 0, 1),))], pricer, dt)
    comp = next(i for i, leaf in enumerate(whole.leaves) if leaf.block is not None)
    kv_b_192 = _kernel_times(g, pricer, dt, Step((SeqGroup(192, 0, 1),)))["L0.kv_b"]
    assert ev.leaf_time_us[comp, 0] == pytest.approx(130.0 + kv_b_192 + 1966.08)
    assert ev.leaf_source[comp, 0] == ROOFLINE
    # a chunk without a prefix runs no attention over cached keys: its own row, measured
    assert ev.leaf_time_us[comp, 1] == pytest.approx(130.0)
    assert ev.leaf_source[comp, 1] == MEASURED


def test_the_fastest_attention_rate_reads_full_attention_rows_else_the_bf16_peak(tmp_path):
    # the rate is the best full-attention row's FLOPs per µs (1,000 here, as above), `derived`; a profile without
    # attention rows falls back to the hardware's bf16 dense peak (H200: 989.5 TFLOP/s = 989.5e6 FLOPs/µs),
    # `roofline`; neither gives no rate
    key = AttentionPrefillKey(1, 1, 8, D.BF16, D.BF16, 0)
    with ProfileDB.create(tmp_path / "a.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(key, AttentionPrefillPoint(1, 64, 64), Measurement(66.56)),
                     (key, AttentionPrefillPoint(1, 32, 32), Measurement(100.0))])
    with ProfileDB.create(tmp_path / "none.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(PREFILL, AttentionPrefillPoint(1, 64, 64), Measurement(130.0))])
    hw = load_hardware("h200")
    rate, code = context_attention_rate(ProfileDB.open(tmp_path / "a.db"), hw) or (0.0, -1)
    assert rate == pytest.approx(1000.0) and code == DERIVED
    rate, code = context_attention_rate(ProfileDB.open(tmp_path / "none.db"), hw) or (0.0, -1)
    assert rate == pytest.approx(989.5e6) and code == ROOFLINE
    assert context_attention_rate(None, None) is None
