"""Fuzz (hypothesis): the readers of user input take random and adversarial input without a traceback or a
hang, and never accept an out-of-range value silently. Each reader either returns a value inside its stated
range or raises a GraphsimError with a one-line message (the CLI's exit 2).

Readers: `--input-len`/`--output-len` (parse_lengths), batch specs (`--batch prefill:1x2048`), trace lines
(load_trace), hardware spec JSON (load_hardware), model config.json (resolve_model + accounting), and the
`simulate` / `kv` command lines in-process (`graphsim.cli.app.main`). The default suite runs 25 examples of
each (10 simulate lines); `-m slow` runs 400.
"""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphsim.errors import GraphsimError

DEADLINE = timedelta(seconds=5)  # per example: a hang fails the test instead of stalling the suite


def _refused(fn, *args) -> Any:
    """fn(*args), or None when it refused with a one-line GraphsimError (anything else propagates: a crash)."""
    try:
        return fn(*args)
    except GraphsimError as e:
        assert str(e) and "\n" not in str(e), repr(e)
        return None


# --- strategies ---------------------------------------------------------------------------------------
NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([0, -1, 1, 2**31, 2**63, 1e308, -0.0]))
JUNK = st.one_of(NUMBERS, st.text(max_size=20), st.none(), st.booleans(), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
LENGTH_TEXT = st.one_of(st.text(max_size=30), st.from_regex(r"\A\s?-?[\d_]{0,25}(\s?[:\-]\s?-?[\d_]{0,25})?\s?\Z"))
BATCH_TEXT = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"\A(prefill|decode|mixed|pre):?[-\d_,kK]{0,12}[xX*]?[-\d_,kK]{0,12}(@[-\d_kK]{0,8})?"
                  r"(\+[-\d_kK]{0,8}[xX][-\d_kK]{0,8})?\Z"))


# --- the checks ---------------------------------------------------------------------------------------
def check_lengths(text: str) -> None:
    from graphsim.serving.requests import parse_lengths

    got = _refused(parse_lengths, text, "--input-len")
    if got is not None:
        assert 1 <= got.lo <= got.hi <= 2**31, (text, got)


def check_batch(text: str) -> None:
    from graphsim.workload import parse_batch_spec

    step = _refused(parse_batch_spec, text)
    if step is not None:
        for g in step.groups:
            assert g.count >= 1 and g.new_tokens >= 1 and g.cached_tokens >= 0, (text, g)
            assert g.count * (g.new_tokens + g.cached_tokens) <= 2**40, (text, g)


def check_trace(lines: list[Any], tmp: Path) -> None:
    from graphsim.serving.requests import load_trace

    path = tmp / "trace.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines))
    specs = _refused(load_trace, str(path))
    for s in specs or []:
        assert math.isfinite(s.arrival_s) and s.arrival_s >= 0 and s.input_tokens >= 1 and s.output_tokens >= 1
        assert s.prefix_tokens >= 0


def check_hardware(field: str, value: Any, tmp: Path) -> None:
    from graphsim.costing.hardware import load_hardware

    base = json.loads((Path(__file__).parents[2] / "graphsim/profiles/hardware/h100_sxm.json").read_text())
    doc = dict(base, **{field: value}) if field in base else base
    path = tmp / "spec.json"
    path.write_text(json.dumps(doc))
    spec = _refused(load_hardware, str(path))
    if spec is None:
        return
    for k, v in spec.to_json().items():  # whatever it accepted is in range
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            assert math.isfinite(v) and v >= 0, (field, value, k, v)
    for k in ("memory_bytes", "memory_bandwidth_bytes_per_s"):
        assert spec.to_json()[k] > 0, (field, value)


CONFIG_KEYS = ("hidden_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers", "intermediate_size",
               "vocab_size", "max_position_embeddings", "head_dim", "rope_theta", "torch_dtype", "tie_word_embeddings")


def check_config(key: str, value: Any, tmp: Path) -> None:
    from graphsim.catalog import resolve_model
    from graphsim.work import accounting

    cfg = dict(resolve_model("llama-3.1-8b").config)
    cfg[key] = value
    path = tmp / "config.json"
    path.write_text(json.dumps(cfg))
    entry = _refused(resolve_model, str(path))
    if entry is None:
        return
    acc = _refused(accounting, entry.config)
    if acc is None:
        return
    if key in CONFIG_KEYS[:7] and isinstance(value, (int, float)) and not isinstance(value, bool):
        assert value > 0, f"{key}={value!r} accepted"
    total = _refused(lambda: acc.params().total)
    assert total is None or total > 0, (key, value, total)


def check_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from graphsim.cli.app import main

    code = main(argv)
    out = capsys.readouterr()
    assert code in (0, 2), (argv, code, out.err[-2000:])
    assert "Traceback" not in out.err + out.out, (argv, out.err[-2000:])
    if code == 2:
        assert out.err.strip(), argv


# --- the tests -----------------------------------------------------------------------------------------
def _run(strategy, check, n: int) -> None:
    @settings(max_examples=n, deadline=DEADLINE, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
              database=None)
    @given(strategy)
    def run(x):
        check(*x) if isinstance(x, tuple) else check(x)

    run()


def _cases(tmp: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, tuple[Any, Any]]:
    from hypothesis.strategies import fixed_dictionaries, sampled_from

    trace_line = st.one_of(st.text(max_size=40), JUNK, fixed_dictionaries(
        {"arrival_s": NUMBERS, "input_tokens": NUMBERS, "output_tokens": NUMBERS},
        optional={"prefix_id": JUNK, "prefix_tokens": NUMBERS, "timestamp": NUMBERS}))
    spec_fields = sampled_from(["memory_bytes", "memory_bandwidth_bytes_per_s", "peak_dense_flops_per_s",
                                "interconnect_bandwidth_bytes_per_s", "interconnect_latency_us", "devices_per_node",
                                "id", "kind", "aliases", "link", "network_latency_us", "compute_capability"])
    rate = st.one_of(NUMBERS.map(str), st.sampled_from(["nan", "inf", "-inf", "1e999", "0", "-3", "abc", ""]))
    length = st.one_of(LENGTH_TEXT, st.sampled_from(["0", "5:1", "-3:4", "1:99999999999999999999"]))
    count = st.one_of(st.integers(-5, 2000).map(str), st.sampled_from(["0", "-1", "1e3", "x", "99999999999999999999"]))
    simulate_argv = st.tuples(rate, length, length, count).map(lambda t: [
        "simulate", "llama-3.1-8b", "--rate", t[0], "--input-len", t[1], "--output-len", t[2], "-n", t[3]])
    gmu = st.one_of(st.floats(allow_nan=True, allow_infinity=True).map(str), st.sampled_from(["0", "1", "1.5", "-0.1"]))
    mml = st.one_of(st.integers(-10, 2**40).map(str), st.sampled_from(["0", "-1", "1k", "abc"]))
    bs = st.one_of(st.integers(-4, 4096).map(str), st.sampled_from(["0", "16", "7"]))
    kv_argv = st.tuples(gmu, mml, bs).map(lambda t: [
        "kv", "llama-3.1-8b", "--gpu", "h100", "--gpu-memory-utilization", t[0], "--max-model-len", t[1],
        "--block-size", t[2], "--json"])
    return {
        "lengths": (LENGTH_TEXT, check_lengths),
        "batch_spec": (BATCH_TEXT, check_batch),
        "trace_lines": (st.lists(trace_line, min_size=1, max_size=5), lambda x: check_trace(x, tmp)),
        "hardware_spec": (st.tuples(spec_fields, JUNK), lambda f, v: check_hardware(f, v, tmp)),
        "model_config": (st.tuples(st.sampled_from(CONFIG_KEYS), JUNK), lambda k, v: check_config(k, v, tmp)),
        "simulate_options": (simulate_argv, lambda argv: check_cli(argv, capsys)),
        "kv_options": (kv_argv, lambda argv: check_cli(argv, capsys)),
    }


CASES = ["lengths", "batch_spec", "trace_lines", "hardware_spec", "model_config", "simulate_options", "kv_options"]


@pytest.fixture()
def stop_before_pricing(monkeypatch):
    """`simulate` stops, with a one-line error, once its inputs are accepted (the fuzz is about the inputs, not
    the seconds of tracing and simulating after them)."""
    import graphsim.serving.deployment as deployment

    class Accepted(GraphsimError):
        pass

    def stop(*_a, **_k):
        raise Accepted("inputs accepted (fuzz stop)")

    monkeypatch.setattr(deployment, "build_cost", stop)


@pytest.mark.parametrize("name", CASES)
def test_fuzz(name, tmp_path, capsys, stop_before_pricing):
    strategy, check = _cases(tmp_path, capsys)[name]
    _run(strategy, check, 10 if name == "simulate_options" else 25)  # a simulate line plans a deployment: ~0.4 s


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_fuzz_long(name, tmp_path, capsys, stop_before_pricing):
    strategy, check = _cases(tmp_path, capsys)[name]
    _run(strategy, check, 400)


def test_out_of_range_simulate_options_are_refused(capsys, stop_before_pricing):
    """Hand-picked: each is refused before pricing (never 'accepted')."""
    from graphsim.cli.app import main

    for bad in (["--rate", "nan"], ["--rate", "-1"], ["--rate", "0"], ["--input-len", "0"], ["--input-len", "9:3"],
                ["--output-len", "1:99999999999999999999"], ["-n", "0"], ["--cv", "nan", "--arrival", "gamma"]):
        argv = ["simulate", "llama-3.1-8b", "--rate", "1", "-n", "3", *bad]
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2 and "fuzz stop" not in err and "Traceback" not in err, (bad, err)
    assert main(["simulate", "llama-3.1-8b", "--rate", "1", "-n", "3"]) == 2
    assert "fuzz stop" in capsys.readouterr().err  # the valid line reaches pricing



def test_out_of_range_batch_specs_are_refused():
    """Found by the fuzz: a batch of 2·10⁵ sequences of 10⁷ new tokens was accepted."""
    from graphsim.workload import WorkloadError, parse_batch_spec

    for spec in ("prefill:200000x10000000", "decode:1x3000000000", "mixed:1x3000000000@0"):
        with pytest.raises(WorkloadError, match="out of range"):
            parse_batch_spec(spec)
    assert parse_batch_spec("decode:256x131072").groups[0].count == 256  # large but servable
