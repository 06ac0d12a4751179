"""Source shares of predicted time in simulate (issue 12 item 7): time-weighted, kernel-level, 'all roofline' only
when it is true."""

import copy
import json

import numpy as np
import pytest

from graphsim.costing.interpolate import EXTRAPOLATED, MEASURED, ROOFLINE
from graphsim.serving.metrics import source_shares
from graphsim.serving.pricing import NUM_SOURCES, TableMeter, TreeCost, WorstSourceMeter


@pytest.fixture(scope="module")
def tables(llama_tree):
    tree, pricer, dtypes = llama_tree
    return TreeCost(tree, pricer, dtypes, max_tokens=2048, max_seqs=256, max_context=32768)


def _drive(tables, meter):
    """A few iterations of every kind through the tables and the meter; their summed time."""
    total = 0.0
    steps = [(64, 64, 64, 1000.0, []), (1500, 1, 0, 0.0, [(1500, 0)]), (1532, 33, 32, 517.3, [(1500, 700)]),
             (300, 3, 1, 20.0, [(200, 0), (99, 4000)])]
    for tokens, seqs, dec, ctx, chunks in steps:
        t, s = tables.step_us(tokens, seqs, dec, ctx, chunks)
        meter.step(t, s, tokens, seqs, dec, ctx, chunks)
        total += t
    times, srcs = tables.decode_run_us(48, 2000.5, 20)
    meter.run(times, srcs, 48, 2000.5)
    return total + float(times.sum()), steps


def test_table_meter_shares_sum_to_the_iteration_times(tables):
    meter = tables.meter()
    assert isinstance(meter, TableMeter) and meter.basis == "kernel"
    total, _ = _drive(tables, meter)
    us = meter.source_us()
    assert us.shape == (NUM_SOURCES,)
    assert us.sum() == pytest.approx(total, rel=1e-9)
    assert us[ROOFLINE] == pytest.approx(total, rel=1e-9)  # the H100 roofline priced every leaf


def test_table_meter_attributes_each_table_to_its_own_source(tables):
    # Relabel the token-linear leaves (G: GEMMs, norms, …) as measured; attention, per-sequence and once-per-
    # iteration parts stay roofline. The measured share must then be exactly Σ G[tokens] over the iterations
    # (read off TreeCost's own G table), and the rest the remaining time.
    relabelled = copy.copy(tables)
    g = tables.G_split.copy()
    g[MEASURED], g[ROOFLINE] = g[ROOFLINE], 0.0
    relabelled.G_split = g
    meter = TableMeter(relabelled)
    total, steps = _drive(relabelled, meter)
    want_g = sum(float(tables.G[tokens]) for tokens, *_ in steps) + 20 * float(tables.G[48])
    us = meter.source_us()
    assert us[MEASURED] == pytest.approx(want_g, rel=1e-9)
    assert us[ROOFLINE] == pytest.approx(total - want_g, rel=1e-9)


def test_worst_source_meter_and_shares_by_hand():
    m = WorstSourceMeter()
    m.step(300.0, MEASURED, 1, 1, 1, 0.0, [])
    m.run(np.asarray([100.0, 200.0, 400.0]), np.asarray([MEASURED, EXTRAPOLATED, EXTRAPOLATED], dtype=np.int8), 4, 9.0)
    us = m.source_us()
    # measured 300 + 100 = 400 µs, extrapolated 200 + 400 = 600 µs of 1000 µs
    assert us[MEASURED] == 400.0 and us[EXTRAPOLATED] == 600.0 and us.sum() == 1000.0
    assert source_shares(dict(enumerate(us))) == {"measured": 0.4, "extrapolated": 0.6}
    assert source_shares({}) == {}


def test_simulation_shares_cover_the_busy_time(llama_tree):
    from serving_helpers import small_setup

    from graphsim.serving import parse_lengths, simulate, summarize, synthetic

    tree, pricer, dtypes = llama_tree
    cost = TreeCost(tree, pricer, dtypes, max_tokens=2048, max_seqs=64, max_context=8192)
    work = synthetic(60, 20.0, parse_lengths("100:1500", "in"), parse_lengths("10:60", "out"), seed=1)
    res = simulate(small_setup(cost=cost), work)
    assert res.source_basis == "kernel"
    assert sum(res.source_us.values()) == pytest.approx(float(res.iterations["dur_s"].sum()) * 1e6, rel=1e-9)
    s = summarize(res)
    assert s.source_shares == {"roofline": pytest.approx(1.0)} and s.all_roofline


def test_worst_source_fallback_for_a_cost_without_splits():
    from serving_helpers import AffineCost, small_setup

    from graphsim.serving import parse_lengths, simulate, summarize, synthetic

    class Mixed(AffineCost):  # prefill iterations extrapolated, decode ones measured
        def step_us(self, tokens, seqs, dec_count, dec_ctx_mean, chunks):
            t, _ = super().step_us(tokens, seqs, dec_count, dec_ctx_mean, chunks)
            return t, EXTRAPOLATED if chunks else MEASURED

        def decode_run_us(self, batch, ctx_mean0, k):
            t, _ = super().decode_run_us(batch, ctx_mean0, k)
            return t, np.full(k, MEASURED, dtype=np.int8)

    work = synthetic(50, 5.0, parse_lengths("100:500", "in"), parse_lengths("20:80", "out"), seed=0)
    res = simulate(small_setup(cost=Mixed()), work)
    it = res.iterations
    want = {code: float(it["dur_s"][it["source"] == code].sum()) * 1e6 for code in (MEASURED, EXTRAPOLATED)}
    assert res.source_basis == "iteration worst source"
    assert res.source_us == pytest.approx(want, rel=1e-9)
    s = summarize(res)
    assert set(s.source_shares) == {"measured", "extrapolated"} and not s.all_roofline


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """One GRAPHSIM_HOME for the CLI tests here: the second reads the graph the first traced from its cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GRAPHSIM_HOME", str(tmp_path_factory.mktemp("home")))
        mp.setenv("COLUMNS", "200")
        yield


def test_simulate_cli_reports_shares(capsys, home):
    pytest.importorskip("torch")
    from graphsim.cli.app import main

    args = ["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "-n", "12", "--input-len", "200:400",
            "--output-len", "8:16", "--max-model-len", "2048"]
    assert main([*args, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["summary"]["source_shares"] == {"roofline": pytest.approx(1.0)}
    assert d["summary"]["source_basis"] == "kernel" and d["summary"]["all_roofline"] is True
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "share of the predicted kernel time by source: all roofline" in out
    assert "every iteration time is a roofline estimate" in out


def test_search_json_reports_shares_of_the_simulated_candidates(capsys, home):
    pytest.importorskip("torch")
    from graphsim.cli.app import main

    assert main(["search", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1", "--isl", "512", "--osl", "32", "--tpot",
                 "50", "--max-num-seqs", "4,16", "--max-num-batched-tokens", "2048", "--mode", "agg", "--verify", "1",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    simulated = [r["simulated"] for r in d["rows"] if r["simulated"] is not None]
    assert simulated and all(sum(sim["source_us"].values()) > 0 for sim in simulated)
    assert all(set(r["steady_state"]["source_us"]) == {"roofline"} for r in d["rows"])
    assert d["source_shares_simulated"] == {"roofline": pytest.approx(1.0)} and d["all_roofline"]


def test_step_split_sums_to_the_step_time(tables):
    for tokens, seqs, dec, ctx, chunks in [(64, 64, 64, 1000.0, []), (1500, 1, 0, 0.0, [(1500, 0)]),
                                           (1532, 33, 32, 517.3, [(1500, 700)]), (300, 3, 1, 20.0, [(200, 0), (99, 4000)])]:
        t, _ = tables.step_us(tokens, seqs, dec, ctx, chunks)
        split = tables.step_split_us(tokens, seqs, dec, ctx, chunks)
        assert split.sum() == pytest.approx(t, rel=1e-9) and split[ROOFLINE] == pytest.approx(t, rel=1e-9)


def test_steady_point_splits_its_period(tables):
    from graphsim.serving.steady import aggregated_point

    # decode-bound: throughput is C / T with T the period n_mix·t_mix + (N − n_mix)·t_dec, which is also what the
    # split sums (steady.py's module docstring), so Σ source_us = C / requests_per_s, in µs
    sp = aggregated_point(tables, isl=512, osl=64, clients=16, max_num_batched_tokens=2048)
    assert sp.bound == "decode"
    assert sum(sp.source_us) == pytest.approx(16 / sp.requests_per_s * 1e6, rel=1e-9)
    assert sp.source_us[ROOFLINE] == pytest.approx(sum(sp.source_us), rel=1e-12)
