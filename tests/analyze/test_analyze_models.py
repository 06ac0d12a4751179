"""The shipped maps fit the catalog models they were written for, at tp=1 and under TP, and the
necessary work the analyzer spreads over the locations reconciles with the accountant — the numbers
`graphsim work` prints for the same step — for Llama and MoE models, per segment and in total."""

from __future__ import annotations

import json

import pytest

from graphsim.catalog import resolve_model
from graphsim.cli.app import main
from graphsim.work import accounting
from graphsim.work.analyzer import necessary_rows, reconcile
from graphsim.workload import parse_batch_spec

pytest.importorskip("torch")

from analyze_helpers import analysis

FAMILIES = [
    ("llama-3.1-8b", "gqa-dense", 2), ("mistral-7b-v0.3", "gqa-dense", 4), ("qwen2.5-7b-instruct", "gqa-dense", 4),
    ("phi-3-mini-4k-instruct", "gqa-dense-prepacked", 4), ("qwen3-8b", "gqa-qknorm-dense", 8),
    ("mixtral-8x7b-v0.1", "gqa-moe", 8), ("qwen3-30b-a3b", "gqa-qknorm-moe", 4), ("deepseek-v3", "mla-moe", 8),
    ("deepseek-v2-lite", "mla-moe-fullrank-q", 2), ("gemma-2-9b", "gqa-sandwich-dense", 8),
    ("gpt-oss-20b", "gqa-sinks-moe", 4), ("qwen3-next-80b-a3b", "gdn-hybrid-moe", 4),
]


@pytest.mark.parametrize("model, map_id, tp", FAMILIES)
def test_shipped_map_fits_and_reconciles(model, map_id, tp):
    for t in (1, tp):
        a = analysis(model, t, "mixed:1x512@1024+16x4096")
        assert a.necessary_work_available, a.reason
        assert a.map_id == f"{map_id} v1"
        assert a.reconciliation is not None and a.coverage is not None
        assert a.reconciliation.ok, a.reconciliation.mismatches
        if a.coverage.missing:  # a kernel no table can price (e.g. a complex-valued rotary op): no share
            assert a.coverage.share is None
        else:
            assert a.coverage.share is not None
            assert 0 < a.coverage.share <= 1


def _work_json(capsys, model: str, *opts: str) -> dict:
    code = main(["work", model, *opts, "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize("model, tp, batch, work_opts", [
    ("llama-3.1-8b", 1, "prefill:1x2048", ["--prefill", "2048@0"]),
    ("llama-3.1-8b", 2, "decode:64x2048", ["--decode", "64x2048"]),
    ("llama-3.1-8b", 2, "mixed:2x1024@512+32x8192", ["--prefill", "2*1024@512", "--decode", "32x8192"]),
    ("qwen3-30b-a3b", 4, "decode:128x4096", ["--decode", "128x4096"]),
    ("deepseek-v3", 8, "mixed:1x2048@0+64x4096", ["--prefill", "2048@0", "--decode", "64x4096"]),
])
def test_necessary_work_reconciles_with_graphsim_work(capsys, model, tp, batch, work_opts):
    a = analysis(model, tp, batch)
    assert a.necessary_work_available
    assert a.reconciliation is not None and a.reconciliation.ok
    assert a.work_command == f"graphsim work {model} " + " ".join(work_opts)
    work = _work_json(capsys, model, *work_opts)
    total = work["work"]["total"]
    n = a.necessary_total
    assert n is not None
    # Σ over locations of the rows the map assigned = `graphsim work`'s total, field by field
    assert n.flops == total["flops"]
    assert n.param_bytes == pytest.approx(total["param_read_bytes"], rel=1e-12)
    assert n.param_bytes_worst == pytest.approx(total["param_read_bytes_worst"], rel=1e-12)
    assert n.state_bytes == pytest.approx(total["state_read_bytes"] + total["state_write_bytes"], rel=1e-12)
    # per segment, field by field, the rows the map consumed equal the accountant's report
    assert a.reconciliation.max_relative_deviation < 1e-12


def test_reconciliation_catches_a_dropped_row():
    acc = accounting(resolve_model("llama-3.1-8b").config)
    rows = necessary_rows(acc, parse_batch_spec("decode:8x128"), ["full.dense"] * 32)
    assert reconcile(rows.rows, rows.report).ok
    dropped = [r for r in rows.rows if r.ref != "ffn.mlp:mlp.down_proj"]
    rec = reconcile(dropped, rows.report)
    assert not rec.ok and any(m.startswith("layers.ffn.mlp.flops: rows") for m in rec.mismatches)


def test_coverage_adds_up_and_names_its_sources():
    a = analysis("llama-3.1-8b", 2, "decode:64x2048")
    c = a.coverage
    assert c is not None
    assert c.mapped_us is not None and c.unmapped_us is not None
    assert c.communication_us is not None and c.iteration_us is not None
    assert c.mapped_us + c.unmapped_us + c.communication_us == pytest.approx(c.iteration_us, rel=1e-9)
    assert c.communication_us > 0 and c.unmapped_us > 0
    assert a.iteration_source == "roofline" and all(r.source == "roofline" for r in a.locations)
    mapped = {r.location for r in a.locations if r.mapped}
    assert "full.dense/self_attn/rotary_embedding" not in mapped and "full.dense/mlp/gate_up_proj" in mapped
    # Llama at tp=2 splits every weight matmul: performed FLOPs and weight bytes of the GEMMs equal the
    # necessary ones (no redundancy there)
    for r in a.locations:
        if r.kind == "gemm":
            assert r.redundancy.flops == 0 and r.redundancy.param_bytes == 0, r.location
