"""DSA module rows (aiconfigurator's dsa_context/generation_module_perf): a DeepSeek-V3.2-style attention block (MLA
projections, indexer, sparse MLA) priced by one measured module row; the import, the table an older profile.db lacks,
and the pricing of prefill groups from rows of m copies of the group (costing/composite.py `_dsa_prefill_rows`).
Torch-free: the graph is built by hand."""

import sqlite3

import pytest

from graphsim.costing.aiconfigurator_tables import (
    MlaGeometry, convert_dsa_context_module, convert_dsa_generation_module,
)
from graphsim.costing.composite import COMPOSITE_DSA, GPU_BOUND_TOKENS, MAX_ROW_BATCH, mla_block
from graphsim.costing.cost_model import CostModel
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.interpolate import MEASURED
from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import (
    AttentionDecodePoint, AttentionPrefillPoint, DsaModuleDecodeKey, DsaModulePrefillKey, Measurement, TableKind,
)
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.ir import DType, Graph, LayerSchedule, Node, Op, T, TensorSpec
from graphsim.ir.geometry import AttentionGeometry, CollectiveGeometry, GemmGeometry, IndexerGeometry, NormGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import SeqGroup, Step

# A small DSA layer: hidden 64, q LoRA 32, kv LoRA 16, 2 heads of nope 16 + rope 8, v 16; an indexer of 2 heads of
# dim 16 keeping 4 keys per query.
DSA = AttentionGeometry(num_heads=2, num_kv_heads=2, head_dim=24, v_head_dim=16, window=0, causal=True,
                        kv_lora_rank=16, qk_rope_head_dim=8, index_topk=4)
ATTN = "m.layers.0.self_attn"
GEO = (2, 16, 16, 8, 16, D.BF16, D.BF16, 64, 32, D.FP8_BLOCK, 2, 16, 4)
PREFILL = DsaModulePrefillKey(*GEO)
DECODE = DsaModuleDecodeKey(*GEO)


def _graph(wk_dtype: str = "bf16") -> Graph:
    x = TensorSpec((1, T, 64), DType.BFLOAT16)

    def k(name, kind, kname, geo, scope, *inputs, dtype="fp8_block", rows=Rows.TOKENS):
        return Node(name, Op.KERNEL, inputs, (x,), KernelAttrs(kind, kname, geo, dtype, rows), scope=scope, layer=0)

    g = Graph("toy-dsa", inputs={"h": x})
    g.nodes = [
        k("L0.norm", KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=64, dim=64), "m.layers.0.input_layernorm", "h",
          dtype="bf16"),
        k("L0.qkv_a", KernelKind.GEMM, "fused_qkv_a_proj", GemmGeometry(n=32 + 16 + 8, k=64), ATTN, "L0.norm"),
        k("L0.q_norm", KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=32, dim=32), f"{ATTN}.q_a_layernorm",
          "L0.qkv_a", dtype="bf16"),
        k("L0.q_b", KernelKind.GEMM, "q_b_proj", GemmGeometry(n=2 * 24, k=32), f"{ATTN}.q_b_proj", "L0.q_norm"),
        k("L0.kv_norm", KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=16, dim=16), f"{ATTN}.kv_a_layernorm",
          "L0.qkv_a", dtype="bf16"),
        k("L0.kv_b", KernelKind.GEMM, "kv_b_proj", GemmGeometry(n=2 * 32, k=16), f"{ATTN}.kv_b_proj", "L0.kv_norm"),
        k("L0.wq_b", KernelKind.GEMM, "wq_b", GemmGeometry(n=2 * 16, k=32), f"{ATTN}.indexer.wq_b", "L0.q_norm"),
        # vLLM's Indexer keeps wk + weights_proj in the model dtype whatever the checkpoint quantizes
        k("L0.wk_w", KernelKind.GEMM, "wk_weights_proj", GemmGeometry(n=16 + 2, k=64), f"{ATTN}.indexer", "L0.norm",
          dtype=wk_dtype),
        k("L0.idx", KernelKind.SPARSE_INDEXER, "sparse_attn_indexer", IndexerGeometry(num_heads=2, head_dim=16, topk=4),
          f"{ATTN}.indexer", "L0.wq_b", "L0.wk_w", dtype="f8e4m3", rows=Rows.NONE),
        k("L0.attn", KernelKind.ATTENTION, "flashmla_sparse", DSA, ATTN, "L0.q_b", "L0.kv_b", "L0.idx", dtype="bf16",
          rows=Rows.NONE),
        k("L0.o_proj", KernelKind.GEMM, "o_proj", GemmGeometry(n=64, k=2 * 16), f"{ATTN}.o_proj", "L0.attn"),
        k("L0.ar", KernelKind.ALL_REDUCE, "all_reduce",
          CollectiveGeometry(num_gpus=2, group="tp", width=64, bytes_per_row=128, reason="row_parallel"),
          f"{ATTN}.o_proj", "L0.o_proj", dtype="bf16"),
        k("L0.mlp", KernelKind.GEMM, "down_proj", GemmGeometry(n=64, k=64), "m.layers.0.mlp.down_proj", "L0.ar"),
    ]
    g.outputs = ["L0.mlp"]
    g.schedule = LayerSchedule(("a",), {"a": 0})
    g.meta.fuse_target = "vllm"
    g.verify()
    return g


@pytest.fixture()
def profile(tmp_path):
    # two prefill module rows and one decode row
    with ProfileDB.create(tmp_path / "dsa.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([
            (PREFILL, AttentionPrefillPoint(4, 4096, 4096), Measurement(8000.0)),
            (PREFILL, AttentionPrefillPoint(4, 8192, 8192), Measurement(20000.0)),
            (DECODE, AttentionDecodePoint(4, 129), Measurement(300.0)),
        ])
    return ProfileDB.open(tmp_path / "dsa.db")


def test_the_block_covers_the_indexer_and_takes_o_projs_dtype():
    b = mla_block(_graph().nodes, Dtypes(), None)
    assert b is not None and b.indexer == IndexerGeometry(num_heads=2, head_dim=16, topk=4)
    # every kernel under the attention scope (the indexer's GEMMs, norm-free here, and its scoring), not the input
    # norm, the all-reduce or the MLP
    assert b.part_names == ("L0.qkv_a", "L0.q_norm", "L0.q_b", "L0.kv_norm", "L0.kv_b", "L0.wq_b", "L0.wk_w",
                            "L0.idx", "L0.attn", "L0.o_proj")
    # the bf16 wk_weights_proj beside fp8-block projections: the module's gemm dtype is o_proj's
    assert b.gemm_dtype == "fp8_block" and b.keys(Dtypes()) == (DECODE, PREFILL)
    # a GEMM of a third dtype is no module the collector timed
    assert mla_block(_graph(wk_dtype="f8e4m3").nodes, Dtypes(), None) is None


def test_prefill_groups_from_rows_of_m_copies(profile):
    assert (GPU_BOUND_TOKENS, MAX_ROW_BATCH) == (16384, 256)
    cm = CostModel.of_kernel_graph(_graph(), None, profile)
    names = [(leaf.name, leaf.attrs.name) for leaf in cm.tree.leaves]
    assert names == [("L0.norm", "rms_norm"), ("L0.attn", COMPOSITE_DSA), ("L0.ar", "all_reduce"),
                     ("L0.mlp", "down_proj")]
    steps = [
        Step((SeqGroup(4096, 0, 1),)),  # one 4,096-token prefill
        Step((SeqGroup(4096, 4096, 1),)),  # 4,096 new tokens after 4,096 cached
        Step((SeqGroup(1, 128, 4), SeqGroup(4096, 0, 1))),  # 4 decodes at kv 129 beside the prefill
        Step((SeqGroup(4096, 0, 1), SeqGroup(4096, 4096, 1))),  # both prefill groups in one step
    ]
    ev = cm.evaluate(steps)
    # m = ceil(16,384 / 4,096) = 4 copies: the row at batch 4 × 4,096 tokens / 4 = 8,000 / 4 = 2,000 µs
    # after 4,096 cached: (T(4, 8192) - T(4, 4096)) / 4 = (20,000 - 8,000) / 4 = 3,000 µs (floor 2,000: not binding)
    # with 4 decodes: their row, 300 µs, + 2,000; both prefill groups: 2,000 + 3,000
    assert ev.leaf_time_us[1] == pytest.approx([2000.0, 3000.0, 2300.0, 5000.0])
    assert list(ev.leaf_source[1]) == [MEASURED] * 4
    assert "dsa_module rows (decode/prefill) replace their kernels" in cm.data_note


def test_without_rows_the_note_names_the_dsa_table(tmp_path):
    with ProfileDB.create(tmp_path / "none.db", ProfileMeta(device="test gpu", engine="vllm")):
        pass
    cm = CostModel.of_kernel_graph(_graph(), None, ProfileDB.open(tmp_path / "none.db"))
    assert COMPOSITE_DSA not in [leaf.attrs.name for leaf in cm.tree.leaves]
    assert ("priced by their kernels (the profile has no dsa_module rows for heads=2 kv_lora_rank=16 hidden=64 "
            "q_lora_rank=32 gemm=fp8_block index=2x16 topk=4)") in cm.data_note


def test_a_chunk_after_a_prefix_is_never_below_the_same_chunk_without_it(tmp_path):
    # rows out of order (a noisy long row): T(4, 8192) = 9,000 < 2 × T(4, 4096); the difference (9,000 - 8,000) / 4
    # = 250 µs is below the chunk without its prefix, 8,000 / 4 = 2,000 µs, which binds
    with ProfileDB.create(tmp_path / "noisy.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(PREFILL, AttentionPrefillPoint(4, 4096, 4096), Measurement(8000.0)),
                     (PREFILL, AttentionPrefillPoint(4, 8192, 8192), Measurement(9000.0))])
    cm = CostModel.of_kernel_graph(_graph(), None, ProfileDB.open(tmp_path / "noisy.db"))
    ev = cm.evaluate([Step((SeqGroup(4096, 4096, 1),))])
    assert ev.leaf_time_us[1] == pytest.approx([2000.0])


def test_small_groups_take_the_largest_batch_the_rows_hold(tmp_path):
    # 32 sequences of 16 tokens: 16,384 / 512 = 32 copies would be batch 1,024; capped at 256 // 32 = 8 copies, the
    # row at batch 256 × 16 tokens (1,600 µs) / 8 = 200 µs
    with ProfileDB.create(tmp_path / "small.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(PREFILL, AttentionPrefillPoint(256, 16, 16), Measurement(1600.0))])
    cm = CostModel.of_kernel_graph(_graph(), None, ProfileDB.open(tmp_path / "small.db"))
    assert cm.evaluate([Step((SeqGroup(16, 0, 32),))]).leaf_time_us[1] == pytest.approx([200.0])


def test_import_converts_the_collectors_rows():
    geo = MlaGeometry(kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, hidden_size=64,
                      q_lora_rank=32, index_n_heads=2, index_head_dim=16, index_topk=4)
    cols = {"batch_size": [4, 1, 1], "isl": [4096, 4096, 16], "num_heads": [2, 2, 2],
            "mla_dtype": ["bfloat16"] * 3, "kv_cache_dtype": ["bfloat16"] * 3, "gemm_type": ["fp8_block"] * 3,
            "step": [0, 128, 0], "latency": [8.0, 2.5, 1.2], "kernel_source": ["FLASHMLA_SPARSE"] * 3,
            "model": ["toy/dsa", "toy/dsa", "toy/mla"]}
    out = convert_dsa_context_module(cols, lambda m: geo if m == "toy/dsa" else MlaGeometry(16, 16, 8, 16, 64, 32))
    rows = {(key, point): m.time_us for key, point, m in out.rows}
    # latency ms → µs; `step` is the cached prefix: kv_len = step + isl; a model without an indexer is skipped
    assert rows == {(PREFILL, AttentionPrefillPoint(4, 4096, 4096)): 8000.0,
                    (PREFILL, AttentionPrefillPoint(1, 4096, 4224)): 2500.0}
    assert sum(out.skipped.values()) == 1
    # a decode row's `step` is the sequence length including the new token (as the MLA module tables)
    dec = convert_dsa_generation_module({**cols, "isl": [1, 1, 1], "step": [129, 2, 2]}, lambda m: geo)
    assert (DECODE, AttentionDecodePoint(4, 129)) in {(key, point) for key, point, _ in dec.rows}


def test_a_profile_written_before_the_dsa_tables_reads_them_as_empty_and_gains_them_on_write(tmp_path):
    path = tmp_path / "old.db"
    meta = ProfileMeta(device="test gpu", engine="vllm")
    with ProfileDB.create(path, meta):
        pass
    with sqlite3.connect(path) as conn:  # as a profile.db written before the tables existed
        conn.execute("DROP TABLE dsa_module_prefill")
        conn.execute("DROP TABLE dsa_module_decode")
    with ProfileDB.open(path) as db:
        assert db.count(TableKind.DSA_MODULE_PREFILL) == 0 and db.keys(TableKind.DSA_MODULE_DECODE) == []
        assert db.rows(PREFILL).coords.shape[0] == 0
    with sqlite3.connect(path) as conn:  # reading changed nothing in the file
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "dsa_module_prefill" not in names
    with ProfileDB.create(path, meta) as db:  # a re-import into it
        db.put(PREFILL, AttentionPrefillPoint(1, 16, 16), Measurement(5.0))
    with ProfileDB.open(path) as db:
        assert db.get(PREFILL, AttentionPrefillPoint(1, 16, 16)) == Measurement(5.0)
