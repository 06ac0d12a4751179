"""The hostile-input sweep (tests/cli/bad_input_cases.py) as tests: every case must exit 2 with one `error:` line
(plus at most a hint) for bad input, or 0 for valid input, never a traceback, and must leave a pre-existing output
file as it was. The default suite runs a sample that touches every command and every kind of bad input; `-m slow`
runs the rest (`python benchmarks/bad_input_sweep.py` runs the whole table with a summary)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from bad_input_cases import PREVIOUS, Case, cases, expand, make_files, run_case
from cli_helpers import commands

CASES = cases()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad_input")
    make_files(root)
    return root


def _param(case: Case):
    marks: list = [pytest.mark.slow] if case.slow else []
    if case.known:
        marks.append(pytest.mark.xfail(reason=case.known, strict=True))
    return pytest.param(case, id=case.id, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_bad_input(case: Case, files: Path):
    outcome = run_case(case, files)
    assert not outcome.problems, (expand(case, files), outcome.problems, outcome.err[-1500:], outcome.crash[-3000:])


def test_every_command_is_fed_bad_input():
    """Each leaf command of the app (found from the app, not listed by hand) has a case that must be refused."""
    refused = {c.argv[:2] for c in CASES if c.want == 2} | {c.argv[:1] for c in CASES if c.want == 2}
    valid = {c.argv[:2] for c in CASES if c.want == 0} | {c.argv[:1] for c in CASES if c.want == 0}
    no_input = {("models",), ("cache", "info"), ("cache", "clear"), ("profiles", "hardware")}  # options only
    for words, _ in commands():
        if words:
            assert tuple(words) in (valid if tuple(words) in no_input else refused), words


def test_the_sweep_is_large_and_the_default_sample_covers_each_kind():
    assert len(CASES) >= 700 and len({c.id for c in CASES}) == len(CASES)
    fast = [c for c in CASES if not c.slow]
    assert 80 <= len(fast) <= 320, len(fast)  # the default suite's share: seconds, not minutes
    for kind in ("cfg_", "db_", ".onnx", "hw_", "trace_", "vllm_", "result_", "capture", "--speculative-config",
                 "/proc/", "existing"):
        assert any(kind in " ".join((c.id, *c.argv)) for c in fast), kind


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_config(tmp_path: Path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text('{"model_type": "llama"}')
    (d / "config.json").chmod(0)
    outcome = run_case(Case("work unreadable", ("work", str(d))), tmp_path)
    assert not outcome.problems, outcome.problems


def test_through_the_entry_point(files: Path):
    """Three cases as a user runs them (a fresh interpreter): the same one line, exit 2, and the output kept."""
    (files / "out.json").write_text(PREVIOUS)
    for argv in (["kv", f"{files}/cfg_kv_heads_not_dividing"], ["capture", "show", f"{files}/bad.json.gz"],
                 ["import", f"{files}/cfg_truncated", "-o", f"{files}/out.json"]):
        proc = subprocess.run([sys.executable, "-m", "graphsim", *argv], capture_output=True, text=True, timeout=300)
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (argv, proc.stderr[-2000:])
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, proc.stderr)
    assert (files / "out.json").read_text() == PREVIOUS


def test_a_run_that_fails_mid_write_keeps_the_previous_outputs(files: Path, monkeypatch: pytest.MonkeyPatch):
    """simulate streams its iteration log and Chrome trace while it runs; a failure after some rows are written
    leaves every pre-existing output file as it was and no temporary beside it."""
    import graphsim.serving as serving
    from graphsim.errors import GraphsimError

    real = serving.simulate
    calls = []

    def failing(setup, workload, progress=None, log=None):
        assert log is not None and log.sink is not None  # --iteration-log and --chrome-trace stream through it
        sink = log.sink

        def fail_after_writing(chunk):  # a chunk of iteration rows goes to the spill and the trace, then the run fails
            sink(chunk)
            calls.append(chunk)
            raise GraphsimError("injected failure mid-run")

        log.sink = fail_after_writing
        return real(setup, workload, progress, log)

    monkeypatch.setattr(serving, "simulate", failing)
    outs = ("out.csv", "out.json", "requests.csv", "hw_out.json")
    case = Case("simulate fails mid-run", ("simulate", "{d}/tiny", "-n", "20", "--rate", "50", "--input-len", "64",
                                           "--output-len", "8", "--iteration-log", "{d}/out.csv", "--chrome-trace",
                                           "{d}/out.json", "--requests-out", "{d}/requests.csv", "--save-result",
                                           "{d}/hw_out.json"), outputs=outs)
    outcome = run_case(case, files)
    assert calls and "injected failure mid-run" in outcome.err, outcome.err[-500:]
    assert not outcome.problems, outcome.problems


@pytest.mark.slow
def test_a_sample_through_the_entry_point(files: Path):
    """30 refusals of the table (a fixed sample) as a user runs them: stderr is exactly one `error:` line (the
    in-process check skips blank lines; a progress bar on a pipe once left one)."""
    import random

    pool = [c for c in CASES if c.want == 2 and not c.corrupt_cache and not any("\x00" in a for a in c.argv)]
    for case in random.Random(7).sample(pool, 30):
        proc = subprocess.run([sys.executable, "-m", "graphsim", *expand(case, files)], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (case.id, proc.stderr[-2000:])
        lines = proc.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (case.id, proc.stderr)
