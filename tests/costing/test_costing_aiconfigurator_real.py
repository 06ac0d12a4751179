"""Against the real aiconfigurator-core 0.12.0 package, when installed: spot values from
the values published for aiconfigurator-core 0.12.0 (h200_sxm, vllm 0.24.0, bf16)."""

import importlib.util

import pytest

from graphsim.costing import aiconfigurator_import as aic
from graphsim.costing.aiconfigurator_tables import convert_context_attention, convert_generation_attention
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.interpolate import KernelPricer
from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, CollectiveKey, CollectiveOp,
    GemmKey, GemmPoint, MessagePoint, TableKind,
)
from graphsim.costing.profile_db import ProfileDB
from graphsim.costing.timing import TimeSource

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("aiconfigurator_core") is None or importlib.util.find_spec("pyarrow") is None,
    reason="aiconfigurator-core / pyarrow not installed (pip install 'graphsim[aiconfigurator]')",
)


def test_real_gemm_and_comm_import(tmp_path):
    out = tmp_path / "h200.db"
    report = aic.import_aiconfigurator("h200_sxm", "vllm", out, tables=["gemm_perf", "nccl_perf", "custom_allreduce_perf"])
    assert report.version == "0.24.0" and report.package_version == "0.12.0"
    with ProfileDB.open(out) as db:
        assert db.meta.provenance["package_version"] == "0.12.0" and db.meta.device == "NVIDIA H200"
        assert db.count(TableKind.GEMM) > 100_000
        pricer = KernelPricer(db)
        key = GemmKey(6144, 4096, D.BF16)
        assert pricer.time(key, GemmPoint(2048)).time_us == pytest.approx(132.173, abs=1e-3)
        assert pricer.time(key, GemmPoint(64)).time_us == pytest.approx(17.794, abs=1e-3)
        mid = pricer.time(key, GemmPoint(3000))
        assert mid.time_us is not None
        assert mid.source is TimeSource.INTERPOLATED and 132.173 < mid.time_us < 400
        graph_ar = pricer.time(CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.BF16, "vllm_custom_graph"), MessagePoint(256))
        assert graph_ar.time_us == pytest.approx(4.378, abs=1e-3)


def test_real_attention_tables_convert_to_the_spot_values():
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    root = aic.aiconfigurator_root()
    located, _ = aic.locate_tables(root, "h200_sxm", "vllm", "0.24.0")
    paths = {loc.spec.table: loc.path for loc in located}

    def rows(table):
        t = pq.read_table(paths[table])
        # pyarrow.compute generates and_/equal at import time; pyarrow's stubs do not declare them
        both, eq = pc.and_, pc.equal  # pyright: ignore[reportAttributeAccessIssue]
        mask = both(both(eq(t["num_heads"], 32), eq(t["num_key_value_heads"], 8)), eq(t["head_dim"], 128))
        return t.filter(mask).to_pydict()

    ctx = {(k, p): m for k, p, m in convert_context_attention(rows("context_attention_perf")).rows}
    gen = {(k, p): m for k, p, m in convert_generation_attention(rows("generation_attention_perf")).rows}
    geo = (32, 8, 128, D.BF16, D.BF16, 0)
    assert ctx[(AttentionPrefillKey(*geo), AttentionPrefillPoint(1, 2048, 2048))].time_us == pytest.approx(87.440, abs=1e-3)
    assert gen[(AttentionDecodeKey(*geo), AttentionDecodePoint(64, 2048))].time_us == pytest.approx(139.888, abs=1e-3)


@pytest.mark.slow
def test_real_full_import(tmp_path):
    report = aic.import_aiconfigurator("h200_sxm", "vllm", tmp_path / "full.db")
    assert report.counts[TableKind.ATTENTION_PREFILL] > 50_000 and report.counts[TableKind.MOE] > 40_000


def test_real_mla_module_decode_row_is_keyed_at_its_sequence_length(tmp_path):
    # mla_generation_module_perf.parquet (h200_sxm, vllm 0.24.0): DeepSeek-V3, 16 heads, batch 64, step 2048,
    # bf16 attention and KV, fp8_block projections, latency 0.1505 ms (FLASH_ATTN_MLA). The collector's step is the
    # sequence length including the new token, so the row is kv_len 2048 (2047 cached + 1 new), measured.
    from graphsim.costing.kernels import MlaModuleDecodeKey

    out = tmp_path / "mla.db"
    aic.import_aiconfigurator("h200_sxm", "vllm", out, tables=["mla_generation_module_perf"])
    with ProfileDB.open(out) as db:
        key = MlaModuleDecodeKey(16, 512, 128, 64, 128, D.BF16, D.BF16, 7168, 1536, D.FP8_BLOCK)
        t = KernelPricer(db).time(key, AttentionDecodePoint(64, 2048))
        assert t.source is TimeSource.MEASURED and t.time_us == pytest.approx(150.5)


@pytest.mark.slow
def test_deepseek_v3_mla_block_is_priced_by_its_module_row(tmp_path):
    # DeepSeek-V3 at TP 8 has 128 / 8 = 16 heads per rank and fp8 block-scaled projections: its decode MLA block
    # at 64 × 2048 is the module row of the test above, 150.5 µs measured, in every one of its 61 layers
    pytest.importorskip("torch")
    from graphsim.cost_model import build_cost_model
    from graphsim.workload import SeqGroup, Step

    out = tmp_path / "mla.db"
    aic.import_aiconfigurator("h200_sxm", "vllm", out, tables=["mla_generation_module_perf", "mla_context_module_perf"])
    cm = build_cost_model("deepseek-v3", "h200", tp=8, profile=str(out))
    composite = [i for i, leaf in enumerate(cm.tree.leaves) if leaf.block is not None]
    assert len(composite) == 2 and sum(cm.tree.multiplicity[i] for i in composite) == 61  # dense and MoE layer types
    ev = cm.evaluate([Step((SeqGroup(1, 2047, 64),))])
    assert [float(ev.leaf_time_us[i, 0]) for i in composite] == pytest.approx([150.5, 150.5])
    assert "composite: mla_module rows (decode/prefill) replace their kernels" in cm.data_note
