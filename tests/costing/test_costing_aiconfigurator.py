"""aiconfigurator-core import: converters on hand-built tables, the importer on a Parquet tree the
test writes itself in the package's layout, the CLI, and (when installed) the real package."""

import importlib.util
import json

import pytest

from graphsim.cli.app import main
from graphsim.costing import aiconfigurator_import as aic
from graphsim.costing.aiconfigurator_tables import (
    MlaGeometry, convert_context_attention, convert_custom_allreduce, convert_gemm, convert_generation_attention,
    convert_generation_mla, convert_mla_context_module, convert_mla_generation_module, convert_moe, convert_nccl,
)
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.errors import OptionalDependencyError
from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionDecodePoint, AttentionPrefillKey, AttentionPrefillPoint, CollectiveKey, CollectiveOp,
    GemmKey, GemmPoint, MessagePoint, MlaDecodeKey, MlaModuleDecodeKey, MlaModulePrefillKey, MoeKey, MoeRouting,
    TableKind, TokensPoint,
)
from graphsim.costing.profile_db import ProfileDB, TimeStatistic

DSV3 = MlaGeometry(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                   hidden_size=7168, q_lora_rank=1536)

GEMM_COLS = {
    "framework": ["VLLM"] * 4, "version": ["0.24.0"] * 4, "device": ["NVIDIA H200"] * 4, "op_name": ["gemm"] * 4,
    "kernel_source": ["torch.nn.functional.linear", "torch.nn.functional.linear", "cutlass", "x"],
    "gemm_dtype": ["bfloat16", "bfloat16", "fp8", "int3"],
    "m": [64, 2048, 64, 1], "n": [6144] * 4, "k": [4096] * 4,
    "latency": [0.017794, 0.132173, 0.011, 1.0],
}


def by_point(conv):
    return {(k, p): m for k, p, m in conv.rows}


def test_gemm_ms_to_us_and_unknown_dtype_skipped():
    conv = convert_gemm(GEMM_COLS)
    rows = by_point(conv)
    assert rows[(GemmKey(6144, 4096, D.BF16), GemmPoint(2048))].time_us == pytest.approx(132.173)
    assert rows[(GemmKey(6144, 4096, D.BF16), GemmPoint(64))].kernel == "torch.nn.functional.linear"
    assert rows[(GemmKey(6144, 4096, D.FP8), GemmPoint(64))].time_us == pytest.approx(11.0)
    assert conv.read == 4 and len(conv.rows) == 3 and sum(conv.skipped.values()) == 1


def test_attention_step_becomes_kv_len_and_optional_columns_default():
    ctx = convert_context_attention({  # an old schema without step / window_size columns
        "batch_size": [1, 2], "isl": [2048, 16], "num_heads": [32, 32], "num_key_value_heads": [8, 8],
        "head_dim": [128, 128], "beam_width": [1, 4], "attn_dtype": ["bfloat16"] * 2,
        "kv_cache_dtype": ["bfloat16", "fp8"], "latency": [0.08744, 0.5], "kernel_source": ["fa3"] * 2,
    })
    key = AttentionPrefillKey(32, 8, 128, D.BF16, D.BF16, 0)
    assert by_point(ctx)[(key, AttentionPrefillPoint(1, 2048, 2048))].time_us == pytest.approx(87.44)
    assert ctx.skipped == {"beam search rows": 1}
    gen = convert_generation_attention({
        "batch_size": [64], "isl": [1], "num_heads": [32], "num_key_value_heads": [8], "head_dim": [128],
        "beam_width": [1], "attn_dtype": ["bfloat16"], "kv_cache_dtype": ["fp8"], "step": [2047],
        "window_size": [128], "latency": [0.139888], "kernel_source": ["fa3"],
    })
    ((k, p, m),) = gen.rows
    assert k == AttentionDecodeKey(32, 8, 128, D.BF16, D.FP8, 128) and p == AttentionDecodePoint(64, 2048)
    assert m.time_us == pytest.approx(139.888)


def test_collectives_elements_to_bytes_and_repeats_averaged():
    nccl = convert_nccl({
        "op_name": ["all_reduce", "all_reduce", "alltoall", "all_gather"], "num_gpus": [2, 2, 8, 4],
        "nccl_dtype": ["half", "half", "int8", "half"], "message_size": [256, 256, 1000, 512],
        "latency": [0.006, 0.004, 0.01, 0.007], "kernel_source": ["NCCL"] * 4,
    })
    rows = by_point(nccl)
    ar = rows[(CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.FP16, "nccl"), MessagePoint(512))]
    assert ar.time_us == pytest.approx(5.0) and ar.samples == 2 and ar.std_us == pytest.approx(1.0)
    assert (CollectiveKey(CollectiveOp.ALL_TO_ALL, 8, D.INT8, "nccl"), MessagePoint(1000)) in rows
    assert nccl.repeats == 1
    custom = convert_custom_allreduce({
        "allreduce_dtype": ["bfloat16"] * 2, "num_gpus": [2, 2], "message_size": [128, 128],
        "latency": [0.004378, 0.020827], "kernel_source": ["vLLM_custom_graph", "vLLM_custom_eager"],
    })
    keys: set[str] = set()
    for k, _, _ in custom.rows:
        assert isinstance(k, CollectiveKey)
        keys.add(k.implementation)
    assert keys == {"vllm_custom_graph", "vllm_custom_eager"}
    assert {p for _, p, _ in custom.rows} == {MessagePoint(256)}


def test_moe_routing_and_fastest_alternative_kernel():
    conv = convert_moe({
        "moe_dtype": ["fp8_block"] * 3, "num_tokens": [4, 4, 4], "hidden_size": [7168] * 3, "inter_size": [2048] * 3,
        "topk": [8] * 3, "num_experts": [256] * 3, "moe_tp_size": [1] * 3, "moe_ep_size": [8] * 3,
        "distribution": ["power_law_1.01", "power_law_1.01", "zipf"], "latency": [0.2, 0.1, 0.3],
        "kernel_source": ["triton", "cutlass", "triton"],
    })
    ((k, p, m),) = conv.rows
    assert k == MoeKey(7168, 2048, 8, 256, 1, 8, D.FP8_BLOCK, MoeRouting.POWER_LAW_1_01) and p == TokensPoint(4)
    assert m.kernel == "cutlass" and m.time_us == pytest.approx(100.0)
    assert conv.alternatives == 1 and conv.skipped == {"routing distribution zipf": 1}


def test_mla_tables_take_model_geometry():
    gen = convert_generation_mla({
        "mla_dtype": ["bfloat16"], "kv_cache_dtype": ["fp8"], "num_heads": [16], "batch_size": [8], "isl": [1],
        "tp_size": [8], "step": [1023], "latency": [0.05], "kernel_source": ["default"],
    }, DSV3)
    ((k, p, _),) = gen.rows
    assert k == MlaDecodeKey(16, 512, 128, 64, 128, D.BF16, D.FP8) and p == AttentionDecodePoint(8, 1024)
    module = convert_mla_context_module({
        "mla_dtype": ["bfloat16"] * 2, "kv_cache_dtype": ["bfloat16"] * 2, "gemm_type": ["fp8_block"] * 2,
        "num_heads": [128] * 2, "batch_size": [1] * 2, "isl": [128] * 2, "tp_size": [1] * 2, "step": [0] * 2,
        "latency": [0.3, 0.3], "kernel_source": ["FLASH_ATTN_MLA"] * 2, "model": ["deepseek-ai/DeepSeek-V3", "acme/unknown"],
    }, lambda model: DSV3 if model == "deepseek-ai/DeepSeek-V3" else None)
    ((k, p, _),) = module.rows
    assert isinstance(k, MlaModulePrefillKey)
    assert (k.hidden_size, k.q_lora_rank, k.gemm_dtype) == (7168, 1536, D.FP8_BLOCK)
    assert p == AttentionPrefillPoint(1, 128, 128) and sum(module.skipped.values()) == 1


def test_mla_module_decode_step_is_the_sequence_length():
    # the module collector logs a decode row's step as seq_len including the new token (step 2048 = 2047 cached +
    # 1 new), where the attention tables log the cached length (step 1023 + 1 new = kv_len 1024, above)
    module = convert_mla_generation_module({
        "mla_dtype": ["bfloat16"], "kv_cache_dtype": ["bfloat16"], "gemm_type": ["fp8_block"], "num_heads": [16],
        "batch_size": [64], "isl": [1], "tp_size": [1], "step": [2048], "latency": [0.15],
        "kernel_source": ["FLASH_ATTN_MLA"], "model": ["deepseek-ai/DeepSeek-V3"],
    }, lambda model: DSV3)
    ((k, p, m),) = module.rows
    assert isinstance(k, MlaModuleDecodeKey) and p == AttentionDecodePoint(64, 2048) and m.time_us == pytest.approx(150.0)


def test_catalog_supplies_deepseek_mla_geometry():
    assert aic.catalog_mla_geometry("deepseek-ai/DeepSeek-V3") == DSV3
    assert aic.catalog_mla_geometry("acme/not-a-model") is None


# ---- the importer on a Parquet tree in the package's layout --------------------------------------


@pytest.fixture()
def fake_root(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pytest.importorskip("yaml")
    root = tmp_path / "systems"
    (root / "data" / "h200_sxm").mkdir(parents=True)
    (root / "query_versions.yaml").write_text(
        "schema_version: 1\ndefaults:\n  vllm: {current: \"0.24.0\", previous: null}\n")
    (root / "h200_sxm.yaml").write_text("misc:\n  nccl_version: '2.26.2'\n")

    def write(rel, cols):
        path = root / "data" / "h200_sxm" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table(cols), path)

    write("gemm/vllm/0.24.0/gemm_perf.parquet", GEMM_COLS)
    write("attention/vllm/0.20.0/generation_attention_perf.parquet", {  # only an older version: back-filled
        "batch_size": [64, 64], "isl": [1, 1], "num_heads": [32, 32], "num_key_value_heads": [8, 8],
        "head_dim": [128, 128], "beam_width": [1, 1], "attn_dtype": ["bfloat16"] * 2,
        "kv_cache_dtype": ["bfloat16"] * 2, "step": [1023, 2047], "window_size": [0, 0],
        "latency": [0.08, 0.139888], "kernel_source": ["fa3"] * 2, "device": ["NVIDIA H200"] * 2,
    })
    write("attention/vllm/0.25.0/context_attention_perf.parquet", {  # only a newer version: not used
        "batch_size": [1], "isl": [16], "num_heads": [32], "num_key_value_heads": [8], "head_dim": [128],
        "beam_width": [1], "attn_dtype": ["bfloat16"], "kv_cache_dtype": ["bfloat16"], "step": [0],
        "window_size": [0], "latency": [0.01], "kernel_source": ["fa3"],
    })
    write("comm/nccl/2.26.2/nccl_perf.parquet", {
        "nccl_dtype": ["half"], "num_gpus": [2], "message_size": [256], "kernel_source": ["NCCL"],
        "op_name": ["all_reduce"], "latency": [0.006],
    })
    return root


def test_import_tree_writes_rows_and_provenance(fake_root, tmp_path):
    seen = []
    report = aic.import_aiconfigurator("h200_sxm", "vllm", tmp_path / "out.db", root=fake_root,
                                       progress=lambda what, done, total: seen.append((done, total)))
    assert seen[-1][0] == seen[-1][1] and seen[0][0] == 0
    assert report.version == "0.24.0" and report.device == "NVIDIA H200"
    by_table = {t.table: t for t in report.tables}
    assert by_table["generation_attention_perf"].back_filled and by_table["generation_attention_perf"].version == "0.20.0"
    assert not by_table["gemm_perf"].back_filled
    assert "context_attention_perf" in report.not_found and "moe_perf" in report.not_found
    with ProfileDB.open(tmp_path / "out.db") as db:
        m = db.meta
        assert (m.device, m.hardware, m.engine, m.engine_version) == ("NVIDIA H200", "h200_sxm", "vllm", "0.24.0")
        assert m.time_statistic is TimeStatistic.MEAN
        assert m.provenance["source"] == "aiconfigurator-core" and m.provenance["backend"] == "vllm"
        assert m.provenance["table.generation_attention_perf"].endswith("(back-filled)")
        assert db.counts()[TableKind.GEMM] == 3 and db.counts()[TableKind.ATTENTION_DECODE] == 2
        got = db.get(GemmKey(6144, 4096, D.BF16), GemmPoint(2048))
        assert got is not None and got.time_us == pytest.approx(132.173)
        ar = db.get(CollectiveKey(CollectiveOp.ALL_REDUCE, 2, D.FP16), MessagePoint(512))
        assert ar is not None and ar.time_us == pytest.approx(6.0)


def test_import_rejects_unknown_system_backend_and_tables(fake_root, tmp_path):
    from graphsim.costing.errors import ImportDataError

    with pytest.raises(ImportDataError, match="no data for system 'h900'; systems: h200_sxm"):
        aic.import_aiconfigurator("h900", "vllm", tmp_path / "o.db", root=fake_root)
    with pytest.raises(ImportDataError, match="no sglang data"):
        aic.import_aiconfigurator("h200_sxm", "sglang", tmp_path / "o.db", root=fake_root)
    with pytest.raises(ImportDataError, match="unknown aiconfigurator tables"):
        aic.import_aiconfigurator("h200_sxm", "vllm", tmp_path / "o.db", root=fake_root, tables=["gemm"])


def test_cli_import_and_show(fake_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(aic, "aiconfigurator_root", lambda: fake_root)
    out = tmp_path / "cli.db"
    code = main(["profiles", "import-aiconfigurator", "--system", "h200_sxm", "--backend", "vllm",
                 "--tables", "gemm_perf,nccl_perf", "-o", str(out), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert [t["table"] for t in report["tables"]] == ["gemm_perf", "nccl_perf"]
    assert main(["profiles", "show", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["rows"]["gemm"] == 3 and shown["meta"]["provenance"]["system"] == "h200_sxm"
    assert main(["profiles", "show", str(out)]) == 0
    assert "rows per kernel table" in capsys.readouterr().out


def test_missing_package_is_a_one_line_error(monkeypatch, tmp_path, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == aic.MODULE else real(name, *a))
    with pytest.raises(OptionalDependencyError, match=r"pip install 'graphsim\[aiconfigurator\]'"):
        aic.aiconfigurator_root()
    code = main(["profiles", "import-aiconfigurator", "--system", "h200_sxm", "--backend", "vllm", "-o", str(tmp_path / "x.db")])
    err = capsys.readouterr().err
    # (graphsim/cli/app.py prints errors as rich markup, which currently eats the "[aiconfigurator]")
    assert code == 2 and "aiconfigurator-core is not installed; pip install" in err and err.strip().count("\n") == 0


def test_show_bad_file_exits_2(tmp_path, capsys):
    bad = tmp_path / "bad.db"
    bad.write_text("not a database")
    assert main(["profiles", "show", str(bad)]) == 2
    assert "not a readable profile.db" in capsys.readouterr().err


def test_hardware_command(capsys):
    assert main(["profiles", "hardware", "--json"]) == 0
    ids = {s["id"] for s in json.loads(capsys.readouterr().out)}
    assert {"h100_sxm", "h200_sxm", "b200_sxm", "a100_sxm", "l40s"} <= ids


def test_a_version_aiconfigurator_never_measured_is_refused(fake_root, tmp_path):
    from graphsim.costing.errors import ImportDataError

    out = tmp_path / "o.db"
    with pytest.raises(ImportDataError, match=r"no vllm 9\.9\.9 tables for h200_sxm; measured versions: 0\.20\.0, 0\.24\.0, 0\.25\.0"):
        aic.import_aiconfigurator("h200_sxm", "vllm", out, root=fake_root, version="9.9.9")
    assert not out.exists()


def test_an_interrupted_import_leaves_the_previous_file_intact(fake_root, tmp_path, monkeypatch):
    out = tmp_path / "out.db"
    aic.import_aiconfigurator("h200_sxm", "vllm", out, root=fake_root)
    with ProfileDB.open(out) as db:
        before = db.counts()
    calls = []

    def interrupted(self, rows):
        calls.append(1)
        if len(calls) == 2:  # after the first table was written
            raise KeyboardInterrupt
        return original(self, rows)

    original = ProfileDB.put_many
    monkeypatch.setattr(ProfileDB, "put_many", interrupted)
    with pytest.raises(KeyboardInterrupt):
        aic.import_aiconfigurator("h200_sxm", "vllm", out, root=fake_root, overwrite=True)
    with ProfileDB.open(out) as db:
        assert db.counts() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.db", "systems"]  # no partial file left


def test_the_db_file_alone_holds_every_row(fake_root, tmp_path):
    out = tmp_path / "out.db"
    aic.import_aiconfigurator("h200_sxm", "vllm", out, root=fake_root)
    wal = tmp_path / "out.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0
    copy = tmp_path / "copy.db"
    copy.write_bytes(out.read_bytes())  # the .db alone, as a user copies it
    with ProfileDB.open(copy) as a, ProfileDB.open(out) as b:
        assert a.counts() == b.counts() and sum(a.counts().values()) == 6
