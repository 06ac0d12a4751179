"""The search for a load (fewest GPUs), refinement to the SLO boundary, and the launch files: stubbed
evaluations with hand-derived answers, plus one small run through the command line."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from graphsim.serving import SLO, Lengths
from graphsim.serving.search import Row, meets
from graphsim.serving.search_eval import Evaluation
from graphsim.serving.search_load import (
    LoadOption, LoadSearchError, LoadTarget, bisect_max, confirm, load_options, refine_rows, replicas_for,
)
from graphsim.serving.search_space import Candidate, PoolConfig, SearchSpec


def _spec(**changes) -> SearchSpec:
    data = dict(base={"model": "llama-3.1-8b", "hardware": "h100"}, gpus=8, isl=Lengths(1024, 1024),
                osl=Lengths(128, 128), slo=SLO(ttft_ms=1000, tpot_ms=20), seed=0)
    data.update(changes)
    return SearchSpec.parse(data)


def _agg(cid: int, tp: int, seqs: int, mnbt: int = 2048) -> Candidate:
    return Candidate(cid, "agg", (PoolConfig("agg", tp, 1, 1, seqs, mnbt),), 1, seqs)


def _ev(cid: int, rps: float, tpot: float = 10.0, ttft: float = 100.0, tok_gpu: float = 1000.0) -> Evaluation:
    return Evaluation(cid, "steady-state", rps, tok_gpu, 1e3 / tpot, ttft, tpot, "measured", None, "decode", 1.0)


# --- fewest GPUs ------------------------------------------------------------------------------------------
def test_replicas_for_a_load():
    # 20 req/s over 7 req/s per replica: 20 / 7 = 2.86 → 3 replicas; exactly 21 / 7 = 3 → 3, not 4
    assert replicas_for(20, 7) == 3
    assert replicas_for(21, 7) == 3
    assert replicas_for(0.5, 7) == 1
    assert replicas_for(5, 0) == 0


def test_fewest_gpus_for_a_request_rate():
    spec = _spec()
    rows = [Row(_agg(0, 2, 64), _ev(0, rps=7.0)),  # 3 replicas × 2 GPUs = 6 GPUs, headroom 21 / 20 = 1.05
            Row(_agg(1, 4, 64), _ev(1, rps=12.0)),  # 2 replicas × 4 GPUs = 8 GPUs
            Row(_agg(2, 1, 64), _ev(2, rps=3.5)),  # ceil(20 / 3.5) = 6 replicas × 1 GPU = 6 GPUs, headroom 21 / 20
            Row(_agg(3, 1, 32), _ev(3, rps=3.4, tok_gpu=900)),  # ceil(5.88) = 6 → 6 GPUs, headroom 20.4 / 20 = 1.02
            Row(_agg(4, 1, 256), _ev(4, rps=9.0, tpot=25.0)),  # misses TPOT ≤ 20 at its own load
            Row(_agg(5, 8, 64), _ev(5, rps=2.0))]  # ceil(20 / 2) = 10 × 8 = 80 GPUs > --max-gpus 64
    target = LoadTarget(request_rate=20)
    opts, lost = load_options(rows, target, lambda ev: meets(ev, spec))
    assert [(o.candidate.id, o.replicas, o.gpus) for o in opts] == [(0, 3, 6), (2, 6, 6), (3, 6, 6), (1, 2, 8)]
    # #0 and #2 tie on GPUs and headroom (1.05): the candidate id decides; #3 has less headroom (1.02)
    assert opts[0].headroom(target) == pytest.approx(21 / 20) and opts[2].headroom(target) == pytest.approx(20.4 / 20)
    why = {r.candidate.id: w for r, w in lost}
    assert why[4] == "misses the SLOs at its own full load" and why[5] == "needs 80 GPUs > --max-gpus 64"
    assert opts[0].per_replica(target) == pytest.approx(20 / 3)


def test_fewest_gpus_for_a_concurrency():
    spec = _spec()
    # 200 clients over 64 per replica: ceil(3.125) = 4 replicas × tp2 = 8 GPUs; over 128 per tp4: 2 × 4 = 8 GPUs,
    # headroom 4·64/200 = 1.28 vs 2·128/200 = 1.28: tied, then tokens/s per GPU (1,000 vs 1,200) picks #1
    rows = [Row(_agg(0, 2, 64), _ev(0, rps=7.0)), Row(_agg(1, 4, 128), _ev(1, rps=9.0, tok_gpu=1200))]
    opts, _ = load_options(rows, LoadTarget(concurrency=200), lambda ev: meets(ev, spec))
    assert [(o.candidate.id, o.replicas, o.gpus) for o in opts] == [(1, 2, 8), (0, 4, 8)]


def test_confirmation_adds_a_replica_when_the_simulation_misses(monkeypatch):
    """The fewest-GPU option misses the SLOs when simulated at 20/3 req/s per replica; with a 4th replica (5 req/s
    each) it meets them, but then 8 GPUs: the 4-GPU-unit option with 2 replicas (8 GPUs, more headroom:
    24 / 20 = 1.2 vs 28 / 20 = 1.4 — #0 wins on headroom) is ranked against it."""
    import graphsim.serving.search_load as sl

    spec = _spec()
    rows = [Row(_agg(0, 2, 64), _ev(0, rps=7.0)), Row(_agg(1, 4, 64), _ev(1, rps=12.0))]
    target = LoadTarget(request_rate=20)
    opts, _ = load_options(rows, target, lambda ev: meets(ev, spec))

    def fake(ctx, o: LoadOption, t: LoadTarget) -> Evaluation:
        per = t.load / o.replicas
        return _ev(o.candidate.id, per, tpot=25.0 if per > 6 else 12.0)  # misses above 6 req/s per replica

    monkeypatch.setattr(sl, "_simulate_at_load", fake)
    answer = confirm(None, opts, target, lambda ev: meets(ev, spec), budget=4)  # type: ignore[arg-type]
    assert answer is not None and answer.candidate.id == 0 and answer.replicas == 4 and answer.gpus == 8
    assert answer.failed_sims == ["3 replicas: simulated TTFT 100 ms, TPOT 25.0 ms"]
    assert answer.headroom(target) == pytest.approx(28 / 20)


def test_bad_targets():
    with pytest.raises(LoadSearchError, match="give one of"):
        LoadTarget()
    with pytest.raises(LoadSearchError, match="give one of"):
        LoadTarget(request_rate=1, concurrency=2)
    with pytest.raises(LoadSearchError, match="rate > 0"):
        LoadTarget(request_rate=math.nan)


# --- refinement -------------------------------------------------------------------------------------------
def test_bisection_finds_the_boundary_of_a_monotone_predicate():
    calls = []

    def ok(v: int) -> bool:
        calls.append(v)
        return v <= 181

    # between 128 (meets) and 256 (misses): 7 halvings of 128, ending at the largest value that meets
    assert bisect_max(128, 256, ok) == (181, 7)
    assert calls[0] == 192 and len(calls) == 7
    assert bisect_max(4, 5, ok) == (4, 0)  # adjacent: nothing to try


class _StubBackend:
    """Evaluates a candidate as TPOT = 0.1 ms × max_num_seqs and tokens/s per GPU = 10 × max_num_seqs."""

    name = "stub"

    def workers(self) -> int:
        return 1

    def map(self, fn, ctx, tasks):
        out = []
        for t in tasks:
            out.append([_ev(c.id, rps=c.pools[-1].max_num_seqs / 10, tpot=0.1 * c.pools[-1].max_num_seqs,
                            tok_gpu=10.0 * c.pools[-1].max_num_seqs) for c in t.candidates])
        return out


def test_refinement_bisects_max_num_seqs_to_the_slo():
    spec = _spec()  # TPOT ≤ 20 ms: max_num_seqs ≤ 200 under the stub (0.1 ms each)
    be = _StubBackend()
    grid = [_agg(i, 1, s) for i, s in enumerate((64, 128, 256))]
    rows = [Row(c, be.map(None, None, [type("T", (), {"candidates": (c,)})()])[0][0]) for c in grid]
    out = refine_rows(spec, rows, None, be, lambda ev: meets(ev, spec), count=4)  # type: ignore[arg-type]
    # only 128 has a failing neighbour (256); 64's neighbour 128 meets. Bisection of (128, 256): 200
    assert [(x.refined_from, x.axis, x.values) for x in out] == [(1, "max_num_seqs", (128, 200, 256))]
    new = rows[-1]
    assert new.candidate.id == 3 and new.candidate.pools[0].max_num_seqs == 200 and new.candidate.clients == 200
    assert out[0].gain == pytest.approx(2000 / 1280 - 1)  # 10 × 200 over 10 × 128


class _BatchStub(_StubBackend):
    """TPOT = 0.1 ms × max_num_seqs + max_num_batched_tokens / 200 ms; tokens/s per GPU = max_num_batched_tokens."""

    def map(self, fn, ctx, tasks):
        return [[_ev(c.id, rps=1.0, tpot=0.1 * c.pools[0].max_num_seqs + c.pools[0].max_num_batched_tokens / 200,
                     tok_gpu=float(c.pools[0].max_num_batched_tokens)) for c in t.candidates] for t in tasks]


def test_refinement_bisects_the_batch_size_too():
    spec = _spec()  # TPOT ≤ 20 ms: 6.4 + m / 200 ≤ 20 → m ≤ 2,720 at 64 sequences
    be = _BatchStub()
    grid = [_agg(0, 1, 64, 2048), _agg(1, 1, 64, 4096)]  # 16.64 ms meets, 26.88 ms misses
    rows = [Row(c, be.map(None, None, [type("T", (), {"candidates": (c,)})()])[0][0]) for c in grid]
    out = refine_rows(spec, rows, None, be, lambda ev: meets(ev, spec), count=4)  # type: ignore[arg-type]
    assert [(x.axis, x.values) for x in out] == [("max_num_batched_tokens", (2048, 2720, 4096))]
    assert rows[-1].candidate.pools[0].max_num_batched_tokens == 2720 and rows[-1].candidate.pools[0].max_num_seqs == 64


# --- launch files -----------------------------------------------------------------------------------------
def _check_args(argv: list[str], settings: dict) -> None:
    """Every setting appears once in argv with its value (flags for the booleans)."""
    for key in ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
                "gpu_memory_utilization", "dtype", "kv_cache_dtype", "block_size"):
        flag = "--" + key.replace("_", "-")
        assert argv.count(flag) == 1, flag
        value = argv[argv.index(flag) + 1]
        want = settings[key]
        assert (float(value) == want) if isinstance(want, float) else (value == str(want)), (flag, value, want)
    for key in ("enable_prefix_caching", "enable_chunked_prefill"):
        flag = key.replace("_", "-")
        assert (f"--{flag}" in argv) == settings[key] and (f"--no-{flag}" in argv) != settings[key]


def test_launch_files_round_trip(tmp_path):
    yaml = pytest.importorskip("yaml")
    from graphsim.serving.launch import engine_settings, parse_launch_sh, write_launch_files

    spec = _spec(base={"model": "llama-3.1-8b", "hardware": "h100", "engine": {"max_model_len": 8192,
                                                                           "gpu_memory_utilization": 0.85}})
    # disaggregated: 1 prefill tp1 + 2 decode tp2 (5 GPUs) × 2 replicas = 10 GPUs on nodes of 8
    c = Candidate(0, "disagg", (PoolConfig("prefill", 1, 1, 1, 256, 8192), PoolConfig("decode", 2, 1, 2, 96, 2048)),
                  1, 192)
    paths = write_launch_files(tmp_path, spec, c, 2, 8, {"prediction": {"ttft_ms": 1.0}})
    assert [p.name for p in paths] == ["launch.sh", "deployment.yaml", "prediction.json"]
    settings = [engine_settings(spec, p) for p in c.pools]
    assert settings[1]["max_num_seqs"] == 96 and settings[1]["max_model_len"] == 8192
    assert settings[0]["gpu_memory_utilization"] == 0.85
    cmds = parse_launch_sh((tmp_path / "launch.sh").read_text())
    assert len(cmds) == 2 * (1 + 2)  # instances: 2 replicas × (1 prefill + 2 decode)
    for argv in cmds:
        assert argv[0] == "meta-llama/Llama-3.1-8B"
        role = 0 if argv[argv.index("--tensor-parallel-size") + 1] == "1" else 1
        _check_args(argv, settings[role])
        assert json.loads(argv[argv.index("--kv-transfer-config") + 1]) == {"kv_connector": "NixlConnector",
                                                                             "kv_role": "kv_both"}
    docs = list(yaml.safe_load_all((tmp_path / "deployment.yaml").read_text()))
    deps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert set(deps) == {"llama-3-1-8b-prefill", "llama-3-1-8b-decode"}
    for k, role in enumerate(("prefill", "decode")):
        d = deps[f"llama-3-1-8b-{role}"]["spec"]
        assert d["replicas"] == c.pools[k].instances * 2
        (ctr,) = d["template"]["spec"]["containers"]
        assert ctr["resources"]["limits"]["nvidia.com/gpu"] == c.pools[k].tp
        assert ctr["command"] == ["vllm", "serve"]
        _check_args(ctr["args"], settings[k])
    pred = json.loads((tmp_path / "prediction.json").read_text())
    assert pred["deployment"]["gpus"] == 10 and pred["prediction"] == {"ttft_ms": 1.0}
    assert [i["command"][2:] for i in pred["instances"]] == cmds
    # nodes of 8: replica 1 (GPUs 0–4) on node 0; replica 2's prefill on GPUs 5, decode tp2 on 6–7, then node 1
    assert [(i["node"], i["gpu_ids"]) for i in pred["instances"]] == [
        (0, [0]), (0, [1, 2]), (0, [3, 4]), (0, [5]), (0, [6, 7]), (1, [0, 1])]


def test_aggregated_launch_has_no_kv_transfer(tmp_path):
    from graphsim.serving.launch import parse_launch_sh, write_launch_files

    spec = _spec()
    write_launch_files(tmp_path, spec, _agg(0, 2, 48, 4096), 3, 8, {})
    cmds = parse_launch_sh((tmp_path / "launch.sh").read_text())
    assert len(cmds) == 3 and all("--kv-transfer-config" not in a for a in cmds)
    assert [a[a.index("--port") + 1] for a in cmds] == ["8000", "8001", "8002"]


# --- through the command line -----------------------------------------------------------------------------
ARGS = ["search", "llama-3.1-8b", "--gpu", "h100", "--gpus", "2", "--isl", "1024", "--osl", "128", "--ttft", "1000",
        "--tpot", "20", "--max-num-seqs", "4,16,64", "--max-num-batched-tokens", "2048", "--mode", "agg",
        "--verify", "1"]


@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "220")


@pytest.mark.slow
def test_cli_target_rate_json_and_launch_files(capsys, tmp_path, isolated_home):
    pytest.importorskip("torch")
    from graphsim.cli.app import main
    from graphsim.serving.launch import parse_launch_sh

    out_dir = tmp_path / "launch"
    assert main([*ARGS, "--target-request-rate", "30", "--save-dir", str(out_dir), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    a = d["answer"]
    assert a is not None and a["gpus"] == a["replicas"] * a["unit_gpus"] and a["gpus"] <= 64
    assert a["capacity_per_replica"] * a["replicas"] >= 30
    assert d["confirmed_by_simulation"] and a["simulated_at_load"]["ttft_ms"] <= 1000
    pool = a["candidate"]["pools"][0]
    cmds = parse_launch_sh((out_dir / "launch.sh").read_text())
    assert len(cmds) == a["replicas"]
    for argv in cmds:
        assert argv[argv.index("--max-num-seqs") + 1] == str(pool["max_num_seqs"])
        assert argv[argv.index("--tensor-parallel-size") + 1] == str(pool["tp"])
        assert argv[argv.index("--max-num-batched-tokens") + 1] == str(pool["max_num_batched_tokens"])


@pytest.mark.parametrize("extra,message", [
    (["--target-request-rate", "0"], "--target-request-rate 0.0: give a rate > 0"),
    (["--target-request-rate", "3", "--target-concurrency", "4"], "give one of --target-request-rate"),
    (["--target-concurrency", "8", "--plot", "x.png"], "--plot draws the throughput search's Pareto frontier"),
])
def test_cli_bad_targets_are_one_line(capsys, extra, message, isolated_home):
    from graphsim.cli.app import main

    assert main(ARGS + extra) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_option_with_replicas_one_for_the_label():
    spec = _spec()
    rows = [Row(dataclasses.replace(_agg(0, 2, 64), replicas=4), _ev(0, rps=7.0))]
    (o,), _ = load_options(rows, LoadTarget(request_rate=20), lambda ev: meets(ev, spec))
    assert o.candidate.replicas == 1 and "×" not in o.candidate.label()


def test_refined_search_stops_at_the_boundary(small_search):
    """On the small search space (Llama-3.1-8B, 4 × H100, roofline): each refined max_num_seqs meets the SLOs in
    the steady state, one more does not, and it lies strictly between its grid neighbours."""
    from graphsim.serving.search import run_search
    from graphsim.serving.search_eval import Task, run_task
    from graphsim.serving.search_load import axis_value, with_value

    spec, ctx = small_search
    res = run_search(spec.model_copy(update={"refine": 2, "verify": 0}), context=ctx)
    assert res.refinements and res.grid == len(res.rows) - len(res.refinements)
    for x in res.refinements:
        lo, v, hi = x.values
        assert lo < v < hi
        row = res.row(x.candidate)
        assert axis_value(row.candidate, x.axis) == v and meets(row.fast, spec)
        (above,) = run_task(ctx, Task("steady", (with_value(row.candidate, x.axis, v + 1, row.candidate.id),)))
        assert not meets(above, spec)
        assert row.fast.output_tokens_per_s_per_gpu > res.row(x.refined_from).fast.output_tokens_per_s_per_gpu
