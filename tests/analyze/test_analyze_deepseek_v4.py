"""DeepSeek-V4 under `graphsim analyze`: the compressed-attention core split into the rows vLLM's four kernels hold
(attention, the two compressors, the indexer), by hand; kernels named with their shape located by the kernel; the
cache/state share of the compressed kernels' and the indexers' bytes; the compressor projections in the model dtype and wo_a's
grouped einsum in the checkpoint's fp8; the two layouts' maps (sliding-first: V4-Flash, HCA-first: V4-Pro) on tiny
configs at tp 1, 2 and ep 2 and (slow) on the real configs at TP1, TP8 and TP8/EP8."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import numpy as np
import pytest

from graphsim.costing import compressed
from graphsim.work import accounting
from graphsim.work.analyzer import necessary_rows
from graphsim.workload import parse_batch_spec

CSA, HCA, SWA = "compressed_sparse_attention", "heavily_compressed_attention", "sliding_attention"
# tests/importers/test_compressed_ops.py's tiny DeepSeek-V4 (4 heads of 32, 8 rotary, one shared K=V head, window 6;
# CSA every 4 tokens with a 2-head indexer of 16 keeping 2 entries, HCA every 8), with two hash-routed layers so its
# regions are V4-Flash's: sliding + hash, CSA + hash, HCA, CSA.
TINY_FLASH = {
    "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "torch_dtype": "bfloat16",
    "hidden_size": 64, "moe_intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 8, "q_lora_rank": 24, "o_groups": 2,
    "o_lora_rank": 16, "sliding_window": 6, "layer_types": [SWA, CSA, HCA, CSA],
    "compress_rates": {CSA: 4, HCA: 8}, "index_n_heads": 2, "index_head_dim": 16, "index_topk": 2,
    "n_routed_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 1, "num_hash_layers": 2, "hc_mult": 3,
    "hc_sinkhorn_iters": 5, "vocab_size": 96, "max_position_embeddings": 256,
}
TINY_PRO = TINY_FLASH | {"layer_types": [HCA, CSA, HCA, CSA]}  # V4-Pro's order: HCA first
TAGS = ["sliding.moe", "sliding.moe2", "sliding.moe3", "sliding.moe4"]


def _core_rows(cfg: dict, batch: str) -> dict[tuple[str, str], tuple[float, float, float]]:
    rows = necessary_rows(accounting(cfg), parse_batch_spec(batch), TAGS)
    return {(r.region, r.ref): (r.work.flops, r.work.state_read_bytes, r.work.state_write_bytes)
            for r in rows.rows if r.part == "attn.core" and not r.ref.endswith("sinks")}


def test_compressed_core_is_split_into_the_four_kernels_rows_by_hand():
    # One sequence, 1 new token at position 7 (7 cached): the step closes a CSA window (tokens 4..7) and the first
    # HCA window (0..7). fp8_ds_mla entry at d 32, rope 8: 24 nope + 8·2 rope + 24 // 64 + 1 = 41 B; index key
    # 16 fp8 + 16 // 128 · 4 = 16 B. Window 6: 5 cached positions read, 1 written.
    # compute (FlashMLA sparse): window pairs min(8, 6) = 6, ×2·H·2d = 2·4·64 = 512 FLOPs a pair;
    #   CSA adds min(⌊8/4⌋, top-k 2) = 2 entries: 8 pairs → 4096 FLOPs; read 5·41 + min(⌊7/4⌋ = 1, 1·2)·41 = 246
    #   HCA adds ⌊8/8⌋ = 1 entry: 7 pairs → 3584 FLOPs; read 5·41 + ⌊7/8⌋ = 0 entries = 205; both write 41
    #   sliding: 6 pairs → 3072 FLOPs, read 205, write 41
    # compressor (CSA, overlapping: 2 series of 32): 1 entry emitted, pooling 2·(2·4 slots)·32 = 512 FLOPs;
    #   fp32 state read back: window 1's cached tokens 4..6, 3 × (kv + score) 2·64 = 384 elements, and window 0's
    #   first series 4 × 2·32 = 256: 640 · 4 B = 2560; stored: token 7's first series (next entry pools it)
    #   2·32 = 64 elements = 256 B, plus the entry 41 B → 297
    # index_compressor (CSA, 2 series of 16): pooling 2·8·16 = 256; read (3·2·32 + 4·2·16) · 4 = 1280;
    #   written 2·16 · 4 + the 16-B key = 144
    # indexer: ⌊8/4⌋ = 2 visible entries × 2 heads × (2·16 + 2) = 136 FLOPs; reads the 1 cached key, 16 B
    # compressor (HCA, disjoint, 1 series of 32): 1 entry, pooling 2·8·32 = 512; state read back: tokens 0..6,
    #   7 × 2·32 = 448 elements · 4 = 1792; nothing stored (the window closed), the entry 41 B
    core = _core_rows(TINY_FLASH, "decode:1x7")
    assert core == {
        ("sliding.moe", "attn.core:compute"): (3072, 205, 41),
        ("sliding.moe2", "attn.core:compute"): (4096, 246, 41),
        ("sliding.moe2", "attn.core:compressor"): (512, 2560, 297),
        ("sliding.moe2", "attn.core:index_compressor"): (256, 1280, 144),
        ("sliding.moe2", "attn.core:indexer"): (136, 16, 0),
        ("sliding.moe3", "attn.core:compute"): (3584, 205, 41),
        ("sliding.moe3", "attn.core:compressor"): (512, 1792, 41),
        ("sliding.moe4", "attn.core:compute"): (4096, 246, 41),
        ("sliding.moe4", "attn.core:compressor"): (512, 2560, 297),
        ("sliding.moe4", "attn.core:index_compressor"): (256, 1280, 144),
        ("sliding.moe4", "attn.core:indexer"): (136, 16, 0),
    }
    # the parts add up to the accountant's core (sinks have no core work): what `graphsim work` prints
    report = accounting(TINY_FLASH).step(parse_batch_spec("decode:1x7"))
    segs = [report.segment(f"layers[{kind}].attn.core") for kind in ("sliding", "csa", "hca")]
    assert tuple(sum(x) for x in zip(*((s.flops, s.state_read_bytes, s.state_write_bytes) for s in segs),
                                    strict=True)) == tuple(sum(v[i] for v in core.values()) for i in range(3))


def test_a_decode_step_that_closes_no_window_has_no_compressor_pooling():
    # 1 new token at position 8 (8 cached): ⌊9/4⌋ = ⌊8/4⌋, no entry; the token's full state is stored for later:
    # CSA 2·64 elements · 4 = 512 B (index compressor 2·32 · 4 = 256 B), nothing read back
    core = _core_rows(TINY_FLASH, "decode:1x8")
    assert core[("sliding.moe2", "attn.core:compressor")] == (0, 0, 512)
    assert core[("sliding.moe2", "attn.core:index_compressor")] == (0, 0, 256)


def _state(op: str, rows: np.ndarray) -> float:
    got = compressed.state_bytes(op, rows)
    assert got is not None
    return float(got[0])


def _bytes(op: str, rows: np.ndarray) -> float:
    got = compressed.work(op, rows, 2.0)
    assert got is not None
    return float(got[1][0])


def test_compressed_kernels_cache_and_state_bytes_by_hand():
    rows = np.array([10.0])
    # attention keys: each row one fp8_ds_mla entry read, all of it cache (584 B at d 512)
    keys = compressed.attention_op(compressed.ATTN_KEYS, 64, 512, 584)
    assert _state(keys, rows) == 5840 == _bytes(keys, rows)
    assert _state(compressed.attention_op(compressed.ATTN_PAIRS, 64, 512, 584), rows) == 0
    # compressor d 512, 2 series, ratio 4, entry 584: a token's fp32 kv + score stored 2·2·512·4 = 8192 B and read
    # back 8192 B, the entry 584 / 4 = 146 B: 16,530 B of 24,722 (the projection read, 8192 B, is an activation)
    op = compressed.compressor_op(512, 2, 4, 584)
    assert _state(op, rows) == 165_300
    assert _bytes(op, rows) == 247_220
    assert compressed.state_bytes("rms_norm", rows) is None


def test_indexer_and_sparse_mla_cache_bytes_by_hand():
    # the lightning indexer (DSA and V4's compressed one share costing/dsa.py's ops), 64 heads of 128, top-512:
    # a decode pair reads its key from the fp8 cache, 128 + 4 B (of 136 with the 8-B logit); a token caches its
    # key, 132 B; prefill pairs move only logits
    from graphsim.costing import dsa

    rows = np.array([10.0])
    shape = dsa.IndexerShape(64, 128, 512)

    def state(op: str, act: float = 2.0) -> float:
        got = dsa.state_bytes(op, rows, act)
        assert got is not None
        return float(got[0])

    assert state(dsa.op_name(dsa.DECODE, shape)) == 1320
    assert state(dsa.op_name(dsa.TOKENS, shape)) == 1320
    assert state(dsa.op_name(dsa.PREFILL, shape)) == 0
    # sparse MLA prefill: a key row read is the latent + rope, (512 + 64) × 1 B in an fp8 cache
    assert state(dsa.attention_op_name(dsa.ATTN_KEYS, 128, 512, 64, 2048), 1.0) == 5760
    assert state(dsa.attention_op_name(dsa.ATTN_PAIRS, 128, 512, 64, 2048)) == 0
    assert dsa.state_bytes("rms_norm", rows, 2.0) is None


@pytest.fixture(autouse=True)
def _roofline_only(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))  # roofline pricing: no profile.db
    monkeypatch.setenv("GRAPHSIM_NO_AUTO_PROFILE", "1")


def _write(tmp_path: Path, name: str, cfg: dict) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(cfg))
    return str(path)


FP8 = {"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                               "weight_block_size": [32, 32]}}


@pytest.mark.slow  # ~25 s: the tiny model traced and fused
def test_compressor_projections_stay_in_the_model_dtype_and_wo_a_is_fp8(tmp_path):
    # vLLM: DeepseekCompressor.fused_wkv_wgate is built with quant_config=None; wo_a goes to fp8_einsum in fp8
    from graphsim.importers.hf import import_hf
    from graphsim.ir import Op
    from graphsim.ir.kernel import KernelAttrs
    from graphsim.passes import run_pipeline

    graph, _ = import_hf(_write(tmp_path, "tiny-v4-fp8", TINY_FLASH | FP8), cache=False)
    fused = run_pipeline(copy.deepcopy(graph), "fuse{target=vllm}").graph
    dtypes = {n.scope.split("layers.1.", 1)[1] + "/" + a.name: a.dtype
              for n in fused.nodes if n.op is Op.KERNEL and n.layer == 1
              for a in [n.attrs_as(KernelAttrs)] if a.kind.value == "gemm"}
    assert dtypes["self_attn.compressor.kv_proj/kv_proj"] == "bf16"
    assert dtypes["self_attn.compressor.indexer.gate_proj/gate_proj"] == "bf16"
    assert dtypes["self_attn.o_a_proj/fp8_einsum"] == dtypes["self_attn.q_b_proj/q_b_proj"] == "fp8_block"


def _analyze(path: str, cases, batch: str = "decode:2x40"):
    from graphsim.analysis import analyze_prepared, prepare_model
    from graphsim.importers.hf import import_hf

    graph, _ = import_hf(path, cache=False)
    return {(tp, ep): analyze_prepared(prepare_model(path, gpu="h200", tp=tp, ep=ep, batch=batch, graph=graph))
            for tp, ep in cases}


@pytest.mark.slow  # ~14 s each: traced, then analysed at three deployments
@pytest.mark.parametrize(("cfg", "map_id"), [(TINY_FLASH, "compressed-hc-moe-sliding-first"),
                                             (TINY_PRO, "compressed-hc-moe-hca-first")])
def test_tiny_layouts_fit_their_maps_and_each_kernel_holds_its_part(tmp_path, cfg, map_id):
    got = _analyze(_write(tmp_path, map_id, cfg), ((1, 1), (2, 1), (2, 2)), batch="mixed:1x24@16+2x40")
    for (tp, ep), a in got.items():
        assert a.necessary_work_available, (tp, ep, a.reason)
        assert a.map_id == f"{map_id} v1"  # EP over the TP group: the TP graph (passes/partition/ep.py)
        assert a.reconciliation is not None and a.reconciliation.ok, a.reconciliation
    by = {r.location: r for r in got[(1, 1)].locations}
    for region in ("sliding.moe2", "sliding.moe4"):  # CSA
        assert by[f"{region}/self_attn/flashmla_sparse_swa"].rows == ("attn.core:compute", "attn.core:self_attn.sinks")
        assert "attn.core:compressor" in by[f"{region}/self_attn/deepseek_compressor"].rows
        assert "attn.core:index_compressor" in by[f"{region}/self_attn/deepseek_compressor#2"].rows
        idx = by[f"{region}/self_attn/sparse_attn_indexer"]
        # the indexer kernel scores exactly the pairs the accountant counts
        assert idx.rows == ("attn.core:indexer",) and idx.necessary.flops == idx.performed.flops > 0
    att = by["sliding.moe3/self_attn/flashmla_sparse_swa"]  # HCA: the attention's FLOPs are the accountant's
    assert att.necessary.flops == att.performed.flops > 0


def _model_configs() -> Path | None:
    try:
        import aiconfigurator_core
    except ImportError:
        return None
    path = Path(aiconfigurator_core.__file__).parent / "model_configs"
    return path if path.is_dir() else None


@pytest.mark.slow  # each real config traced once (~40 s) and analysed at three deployments
@pytest.mark.parametrize(("name", "map_id"), [("deepseek-ai--DeepSeek-V4-Flash", "compressed-hc-moe-sliding-first"),
                                              ("deepseek-ai--DeepSeek-V4-Pro", "compressed-hc-moe-hca-first")])
def test_real_configs_at_tp1_tp8_ep8(name, map_id):
    root = _model_configs()
    if root is None:
        pytest.skip("aiconfigurator_core's model_configs are not installed")
    got = _analyze(os.fspath(root / f"{name}_config.json"), ((1, 1), (8, 1), (8, 8)),
                   batch="mixed:1x512@1024+16x4096")
    for (tp, ep), a in got.items():
        assert a.necessary_work_available, (tp, ep, a.reason)
        assert a.map_id == f"{map_id} v1"  # EP over the TP group: the TP graph (passes/partition/ep.py)
        assert a.reconciliation is not None and a.reconciliation.ok, a.reconciliation
        assert a.coverage is not None and a.coverage.share is not None and 0.3 < a.coverage.share <= 1
