"""tp on Mamba2 mixers with fewer B/C groups than ranks (graphsim/passes/partition/mamba_groups.py).

vLLM's MambaMixer2 (model_executor/layers/mamba/mamba_mixer2.py) pads n_groups == 1 to one group per rank
(`extra_groups_for_head_shards`) and loads group 0's B and C rows on every rank. Expected per-rank shapes, state
and weight bytes are derived by hand from the tiny config below (arithmetic in the comments), never from the code
under test.
"""

import json
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import CollectiveGeometry, Conv1dGeometry, GemmGeometry, LinearAttentionGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.passes import run_pipeline
from graphsim.passes.base import PassError
from graphsim.passes.partition import mamba_groups
from graphsim.passes.partition.conservation import ConservationError
from graphsim.serving.graph_kv import graph_kv_layout
from graphsim.serving.kv_layout import KvLayoutError, kv_layout
from graphsim.serving.memory import weight_bytes_per_rank
from graphsim.work import accounting

# Bamba: layer 0 a Mamba2 mixer, layer 1 attention. Mamba2: 8 heads × 16 = intermediate 128 (= expand 2 × hidden
# 64), ONE group, ssm state 16, conv kernel 4.
BAMBA = {
    "architectures": ["BambaForCausalLM"], "model_type": "bamba", "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "attn_layer_indices": [1], "num_attention_heads": 4, "num_key_value_heads": 2,
    "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_n_groups": 1, "mamba_d_state": 16, "mamba_d_conv": 4,
    "mamba_expand": 2, "mamba_chunk_size": 8, "mamba_conv_bias": True, "mamba_proj_bias": False,
    "vocab_size": 96, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
MX = "model.layers.0.mamba"


@pytest.fixture(scope="module")
def bamba():
    graph, _ = import_hf(ResolvedModel("tiny-bamba", dict(BAMBA), "path", "test"), cache=False)
    return graph, run_pipeline(graph, "fold,fuse{target=vllm}").graph


def _tp(graph, t):
    res = run_pipeline(graph, f"tp{{size={t}}}").results[0][1]
    return res.graph, res


def _node(graph, suffix):
    hits = [n for n in graph.nodes if n.name.endswith(suffix) and isinstance(n.attrs, KernelAttrs)]
    assert hits, suffix
    return hits[0]


def test_one_group_is_replicated_on_every_rank_at_tp2(bamba):
    out, res = _tp(bamba[1], 2)
    # in_proj, unpartitioned: gate 128 + x 128 + B 16 + C 16 + dt 8 = 296 outputs. vLLM pads the 1 group to 2
    # (296 + 2·16 = 328 over 2 ranks): per rank gate 64 + x 64 + B 16 + C 16 (the whole group) + dt 4 = 164
    in_proj = _node(out, "L0.in_proj").kernel.geometry_as(GemmGeometry)
    assert (in_proj.n, in_proj.k) == (164, 64)
    assert tuple(out.params[f"{MX}.in_proj.weight"].shape) == (164, 64)  # 164 × 64 × 2 B = 20992 B per rank
    # conv over x, B, C: 128 + 16 + 16 = 160 channels; per rank x 64 + B 16 + C 16 = 96; its weight and bias follow
    assert _node(out, "L0.causal_conv1d").kernel.geometry_as(Conv1dGeometry).channels == 96
    assert tuple(out.params[f"{MX}.conv1d.weight"].shape) == (96, 1, 4)
    assert tuple(out.params[f"{MX}.conv1d.bias"].shape) == (96,)
    # the scan: 8 / 2 = 4 heads per rank, reading the one group whole
    scan = _node(out, "L0.mamba_chunk_scan_combined").kernel.geometry_as(LinearAttentionGeometry)
    assert (scan.num_k_heads, scan.num_v_heads, scan.k_head_dim) == (1, 4, 16)
    # per-head D / dt_bias / A_log: 8 / 2 = 4 per rank
    assert all(tuple(out.params[f"{MX}.{p}"].shape) == (4,) for p in ("D", "dt_bias", "A_log"))
    # the gated norm over the one group (all 128 features) is spread over the ranks: 64 each, then vLLM's
    # Mixer2RMSNormGated all-reduces the f32 sum of squares (1 value, 4 B per token); out_proj stays row-parallel
    norm = _node(out, "L0.rms_norm_gated")
    reduce = out.nodes[out.nodes.index(norm) + 1]
    assert reduce.kernel.kind is KernelKind.ALL_REDUCE
    assert reduce.kernel.geometry_as(CollectiveGeometry).bytes_per_row == 4
    out_proj = _node(out, "L0.out_proj").kernel.geometry_as(GemmGeometry)
    assert (out_proj.n, out_proj.k) == (64, 64)
    assert out.nodes[out.nodes.index(_node(out, "L0.out_proj")) + 1].kernel.kind is KernelKind.ALL_REDUCE
    # the replication is stated, not hidden
    assert any("Mamba2 B/C groups (n_groups < tp)" in note for note in res.notes)
    assert res.stats["mamba_groups_replicated"] == 2  # in_proj and the conv


def test_one_group_at_tp4(bamba):
    out, _ = _tp(bamba[1], 4)
    # 1 group padded to 4: in_proj 128 + 128 + 4·16 + 4·16 + 8 = 392 → 98 per rank (32 + 32 + 16 + 16 + 2);
    # conv 128 + 4·16·2 = 256 → 64 per rank (32 + 16 + 16); 8 / 4 = 2 heads per rank
    assert _node(out, "L0.in_proj").kernel.geometry_as(GemmGeometry).n == 98
    assert tuple(out.params[f"{MX}.in_proj.weight"].shape) == (98, 64)
    assert _node(out, "L0.causal_conv1d").kernel.geometry_as(Conv1dGeometry).channels == 64
    scan = _node(out, "L0.mamba_chunk_scan_combined").kernel.geometry_as(LinearAttentionGeometry)
    assert (scan.num_k_heads, scan.num_v_heads) == (1, 2)


def test_scan_priced_per_rank_with_the_whole_group(bamba):
    from graphsim.costing import ssm
    from graphsim.costing.kernel_map import ssm_shape

    out, _ = _tp(bamba[1], 2)
    shape = ssm_shape(_node(out, "L0.mamba_chunk_scan_combined").kernel)
    assert (shape.heads, shape.head_dim, shape.state, shape.groups, shape.chunk) == (4, 16, 16, 1, 8)
    # per prefill token and rank (chunk Q 8, H 4, P 16, N 16, G 1): CB 2·8·16·1 = 256, (CB∘L)·x 8·16·4 = 512,
    # chunk states and state → output 4·16·16·4 = 4096, inter-chunk 2·16·16·4 / 8 = 256 → 5120 FLOPs
    assert ssm.flops_per_token(ssm.PREFILL, shape) == 256 + 512 + 4096 + 256 == 5120
    # bytes per prefill token, bf16: x 64 + y 64 + B 16 + C 16 + dt 4 = 164 elements × 2 B = 328 B, fp32 CB block
    # 2·8·1·4 = 64 B, fp32 chunk states 4·(4·16·16)/8·4 = 2048 B → 2440 B
    assert ssm.bytes_per_row(ssm.PREFILL, shape, 2.0) == 328 + 64 + 2048 == 2440


def test_conservation_holds_grown_kernels_to_their_stated_factor(bamba, monkeypatch):
    # tp 2: in_proj per rank × 2 = 328 / 296 of the whole; a pass stating 1.0 (plain split) is caught
    monkeypatch.setattr(mamba_groups.GroupReplication, "factor", lambda self, name: 1.0)
    with pytest.raises(ConservationError, match=r"L0\.in_proj.*Mamba2 B/C groups"):
        _tp(bamba[1], 2)


def test_conservation_catches_weights_not_grown_with_their_kernel(bamba, monkeypatch):
    grow = mamba_groups.grow

    def geometry_only(n, graph, params, rep, t, where):  # the weights left whole on every rank
        return grow(n, graph, {}, rep, t, where)
    monkeypatch.setattr(mamba_groups, "grow", geometry_only)
    with pytest.raises(ConservationError, match="weight bytes"):
        _tp(bamba[1], 2)


def test_groups_neither_one_nor_divisible_are_refused(bamba):
    # 2 groups at tp 4: vLLM's MambaMixer2 asserts n_groups % tp == 0 or n_groups == 1
    two = bamba[1].copy([n.with_(attrs=n.kernel.with_geometry(replace(n.kernel.geometry, num_k_heads=2)))
                         if n.name.endswith("mamba_chunk_scan_combined") else n for n in bamba[1].nodes])
    with pytest.raises(PassError, match=r"n_groups = 2 is neither 1 nor divisible by tp size 4") as e:
        _tp(two, 4)
    assert "\n" not in str(e.value)


def test_quantized_one_group_is_refused_at_tp(bamba):
    g = bamba[1].copy()
    g.meta.quantization_config = {"quant_method": "fp8"}
    with pytest.raises(PassError, match="quantized Mamba2 mixer with n_groups = 1"):
        _tp(g, 2)


def test_state_bytes_per_rank_graph_and_accountant(bamba):
    acc = accounting(dict(BAMBA))
    # tp 2: conv (128 + 2·2·16)/2 = 96 channels × (4 − 1) × 2 B = 576 B; ssm 4 heads × 16 × 16 × 2 B (Bamba's
    # mamba_ssm_cache_dtype "auto": bf16) = 2048 B → 2624 B per request for the one Mamba2 layer
    # tp 4: conv (128 + 2·4·16)/4 = 64 × 3 × 2 B = 384 B; ssm 2 × 16 × 16 × 2 B = 1024 B → 1408 B
    for tp, want in ((2, 96 * 3 * 2 + 4 * 16 * 16 * 2), (4, 64 * 3 * 2 + 2 * 16 * 16 * 2)):
        assert want == {2: 2624, 4: 1408}[tp]
        assert kv_layout(acc.spec, acc.precision, tp).state_bytes_per_request == want
        got = graph_kv_layout(bamba[0], acc.precision.kv, acc.precision.state, tp)
        assert got.state_bytes_per_request == want


def test_accountant_refuses_groups_vllm_cannot_split():
    acc = accounting({**BAMBA, "mamba_n_groups": 2})
    with pytest.raises(KvLayoutError, match=r"n_groups = 2 is neither 1 nor divisible by tp = 4"):
        kv_layout(acc.spec, acc.precision, 4)


def test_weight_bytes_per_rank_count_the_replicated_group():
    one, two = accounting(dict(BAMBA)), accounting({**BAMBA, "mamba_n_groups": 2})
    # At tp 2 one group padded to 2 gives per rank exactly the in_proj (164 × 64) and conv (96 × 4) of a
    # two-group mixer split in halves (328 / 2, 192 / 2). The conv bias is counted whole on every rank
    # (memory.weight_bytes_per_rank: vectors whole): 160 vs 192 channels, 32 × 2 B = 64 B fewer with one group.
    assert weight_bytes_per_rank(two.spec, two.precision, 2) - weight_bytes_per_rank(one.spec, one.precision, 2) == 64
    # At tp 1 nothing is padded: one group has 2·16 fewer in_proj rows (× 64 × 2 B = 4096 B), conv rows
    # (× 4 × 2 B = 256 B) and conv bias entries (× 2 B = 64 B) than two: 4416 B
    assert weight_bytes_per_rank(two.spec, two.precision, 1) - weight_bytes_per_rank(one.spec, one.precision, 1) == 4416


# --- a real config at tp 4 (slow: traces a 9.8 B model, imports aiconfigurator's H200 tables) ---------------------
BAMBA_9B = Path(__file__).resolve().parents[1] / "data" / "Bamba-9B" / "config.json"  # sources in its "_source"


@pytest.mark.slow
def test_bamba_9b_tp4_end_to_end(h200_vllm_db_path, tmp_path, monkeypatch, capsys):
    from graphsim.cli.app import main
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.predict import predict
    from graphsim.costing.profile_db import ProfileDB
    from graphsim.workload import parse_batch_spec

    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    batches = ["decode:64x4096"]
    steps = [parse_batch_spec(s) for s in batches]
    with ProfileDB.open(h200_vllm_db_path) as db:
        cm = build_cost_model(str(BAMBA_9B), "h200", tp=4, profile=db)
        pred = predict(cm, steps, batches)
    # in_proj: gate 8192 + x 8192 + B 128 + C 128 + dt 128 = 16768; 1 group padded to 4 → (16768 + 2·3·128) / 4 =
    # 4384 per rank (2048 + 2048 + 128 + 128 + 32); conv (8192 + 2·4·128) / 4 = 2304 channels
    mamba = [n for n in cm.graph.nodes if n.layer == 0 and isinstance(n.attrs, KernelAttrs)]
    assert next(n for n in mamba if n.name.endswith("in_proj")).kernel.geometry_as(GemmGeometry).n == 4384
    assert next(n for n in mamba if n.name.endswith("causal_conv1d")).kernel.geometry_as(Conv1dGeometry).channels == 2304
    rep = pred.batches[0]
    assert rep.total_us is not None, rep.missing
    assert sum(r.total_us or 0.0 for r in rep.rows if r.approximate) <= 0.01 * rep.total_us
    # plausible: at least every bf16 weight on a rank read once (9.778 B params, the replicated B/C rows on top
    # are < 0.1 % of them), at most 3 × the sum of the kernels' roofline floors
    hw = cm.pricer.hardware
    assert hw is not None
    assert rep.total_us >= 9_778_138_240 * 2 / 4 / hw.memory_bandwidth_bytes_per_s * 1e6
    assert rep.total_us <= 3 * float(cm.roofline_sum_us(steps)[0])
    # kv at tp 4, per request: 29 Mamba2 layers × (conv 2304 × 3 × 2 B = 13824 B + ssm 32 heads × 64 × 128 × 2 B =
    # 524288 B) = 15,605,248 B; per token: 3 attention layers × K and V × 8 / 4 = 2 kv heads × 128 × 2 B = 3072 B
    acc = accounting(json.loads(BAMBA_9B.read_text()))
    layout = kv_layout(acc.spec, acc.precision, 4)
    assert layout.state_bytes_per_request == 29 * (2304 * 3 * 2 + 32 * 64 * 128 * 2) == 15_605_248
    assert layout.bytes_per_token == 3 * 2 * 2 * 128 * 2 == 3072
    assert main(["kv", str(BAMBA_9B), "--gpu", "h200", "-tp", "4", "--max-model-len", "4096", "--json"]) == 0
    assert main(["simulate", str(BAMBA_9B), "--gpu", "h200", "-tp", "4", "--profile", str(h200_vllm_db_path),
                 "--concurrency", "4", "-n", "8", "--input-len", "512", "--output-len", "16", "--max-model-len", "4096",
                 "--json"]) == 0
    assert "Traceback" not in capsys.readouterr().err
