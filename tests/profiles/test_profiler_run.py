"""The profiler end to end on CPU: a tiny Llama's eager kernel graph into a tmp profile.db."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

pytest.importorskip("torch")

from profiler_helpers import fast_timing, tiny_grid, tiny_model

from graphsim.costing.kernel_map import Dtypes
from graphsim.costing.kernels import ElementwiseKey, point_coords
from graphsim.costing.profile_db import ProfileDB
from graphsim.ir import Op
from graphsim.profiles.profiler import collect_targets, open_device, points_for_key, profile_graph, profile_model


@pytest.fixture(scope="module")
def eager_graph():
    from graphsim.importers.hf import import_hf
    from graphsim.passes import run_pipeline

    graph, _ = import_hf(tiny_model())
    return run_pipeline(graph, "fold,fuse{target=eager},tp{size=1}").graph


@pytest.fixture(scope="module")
def profiled(tmp_path_factory, eager_graph):
    path = tmp_path_factory.mktemp("prof") / "tiny.db"
    info = open_device("cpu", threads=1)
    report = profile_graph(eager_graph, path, info, grid=tiny_grid(), timing=fast_timing(), target="eager",
                           pipeline="fold,fuse{target=eager},tp{size=1}")
    return path, report


def test_every_claimed_key_has_all_its_rows(profiled, eager_graph):
    path, report = profiled
    targets, skipped = collect_targets(eager_graph, Dtypes.for_graph(eager_graph.meta))
    assert not skipped  # a dense Llama at tp=1 has no keyless kernels and no collectives
    assert report.keys_measured == len(targets) and not report.unmeasurable and report.points_failed == 0
    kinds = {t.key.KIND.value for t in targets}
    assert {"gemm", "attention_prefill", "attention_decode", "elementwise"} <= kinds
    with ProfileDB.open(path) as db:
        for t in targets:
            want = {tuple(point_coords(p)) for p in points_for_key(t.key, tiny_grid(), t.once_only)}
            have = {tuple(int(c) for c in row) for row in db.rows(t.key).coords}
            assert have == want, t.describe()
        total = sum(db.counts().values())
        assert total == report.rows_written
        assert db.meta.engine == "torch" and db.meta.provenance["threads"] == "1"
        assert db.meta.provenance["fuse_target"] == "eager"


def test_times_are_positive_and_finite_with_spread(profiled, eager_graph):
    path, _ = profiled
    targets, _ = collect_targets(eager_graph, Dtypes.for_graph(eager_graph.meta))
    with ProfileDB.open(path) as db:
        for t in targets:
            for p in points_for_key(t.key, tiny_grid(), t.once_only):
                m = db.get(t.key, p)
                assert m is not None and math.isfinite(m.time_us) and m.time_us > 0
                assert m.samples is not None and m.p10_us is not None and m.p90_us is not None
                assert m.std_us is not None
                assert m.samples >= 3 and m.p10_us <= m.time_us <= m.p90_us and m.std_us >= 0
                assert m.kernel  # the implementation that ran is recorded


def test_rows_are_found_by_the_cost_tree(profiled, eager_graph):
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.predict import predict
    from graphsim.workload import parse_batch_spec

    path, _ = profiled
    specs = ["prefill:1x16", "decode:2x127"]  # grid points: m=16 / tokens=16; decode batch 2, kv 128
    with ProfileDB.open(path) as db:
        pred = predict(build_cost_model(eager_graph, profile=db), [parse_batch_spec(s) for s in specs], specs)
    for batch in pred.batches:
        assert not batch.missing, batch.missing
        assert set(batch.tally) == {"measured"}, batch.tally


def test_rerun_resumes_and_skips_existing_rows(tmp_path, eager_graph):
    path = tmp_path / "resume.db"
    info = open_device("cpu", threads=1)
    kw: dict[str, Any] = dict(grid=tiny_grid(), timing=fast_timing(), target="eager", flush_every=4)
    first = profile_graph(eager_graph, path, info, max_points=10, **kw)  # an interrupted run
    assert first.stopped_early and first.rows_written == 10
    with ProfileDB.open(path) as db:
        assert sum(db.counts().values()) == 10
    second = profile_graph(eager_graph, path, info, **kw)
    assert not second.stopped_early
    assert second.rows_skipped_existing == 10
    with ProfileDB.open(path) as db:
        total = sum(db.counts().values())
    assert total == 10 + second.rows_written
    third = profile_graph(eager_graph, path, info, **kw)
    assert third.rows_written == 0 and third.rows_skipped_existing == total


def test_unknown_ops_are_reported_not_faked(tmp_path, eager_graph):
    nodes = []
    renamed = 0
    for n in eager_graph.nodes:
        if n.op is Op.KERNEL and n.attrs.name == "rsqrt":
            n = n.with_(attrs=replace(n.attrs, name="frobnicate"))
            renamed += 1
        nodes.append(n)
    assert renamed
    graph = eager_graph.copy(nodes)
    info = open_device("cpu", threads=1)
    report = profile_graph(graph, tmp_path / "u.db", info, grid=tiny_grid(), timing=fast_timing())
    reasons = {u["kernel"]: u["reason"] for u in report.unmeasurable}
    key = next(k for k in reasons if "frobnicate" in k)
    assert "not in the profiler's op table" in reasons[key]
    with ProfileDB.open(tmp_path / "u.db") as db:
        assert len(db.rows(ElementwiseKey("frobnicate", 1, Dtypes().of("f32")))) == 0
    assert any(k.unmeasurable for k in report.keys)


def test_profile_model_and_kind_filter(tmp_path):
    report = profile_model(tiny_model(), tmp_path / "g.db", device="cpu", kinds="gemm", grid=tiny_grid(),
                           timing=fast_timing(), threads=1)
    assert report.keys and {k.table for k in report.keys} == {"gemm"}
    assert report.pipeline == "fold,fuse{target=eager},tp{size=1}"
    assert report.rows_written == len(report.keys) * len(tiny_grid().gemm_m)
