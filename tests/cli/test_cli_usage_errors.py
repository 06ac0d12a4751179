"""Usage errors of every command (found from the app, not listed by hand) through the installed `graphsim`
script: an unknown option and a bad value of a typed option each print one `error:` line naming the
option, the command and its --help, and exit 2, with no traceback. A missing optional dependency names
the pip line of the extra that adds it."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from cli_helpers import commands, entry_point, options, run_cli, value_type

pytestmark = pytest.mark.skipif(entry_point() is None, reason="the graphsim script is not installed")

# String options whose value is checked while the command line is parsed, each with a value it rejects.
CHECKED_STRINGS = {"--kv-dtype": "fp4x", "--dtype": "fp5", "--target": "sglangx", "--gpu-memory-utilization": "1.5"}


def _bad_value(cmd) -> tuple[str, str] | None:
    for p in options(cmd):
        if value_type(p) is not None:
            return p.opts[0], "not-a-number"
    for p in options(cmd):
        if p.opts[0] in CHECKED_STRINGS:
            return p.opts[0], CHECKED_STRINGS[p.opts[0]]
    return None


def _cases() -> list:
    cases = []
    for words, cmd in commands():
        name = " ".join(("graphsim", *words))
        cases.append(pytest.param([*words, "--no-such-option"], name, "--no-such-option", None,
                                  id=f"{name} --no-such-option"))
        bad = _bad_value(cmd) if words else None
        if bad is not None:
            option, value = bad
            cases.append(pytest.param([*words, option, value], name, option, value, id=f"{name} {option} {value}"))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def ran() -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Every case run once, a few at a time (each is a fresh interpreter)."""
    argvs = [tuple(c.values[0]) for c in CASES]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(argvs, pool.map(lambda a: run_cli(list(a)), argvs), strict=True))


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    return lines[0]


@pytest.mark.parametrize(("argv", "command", "option", "value"), CASES)
def test_usage_error_is_one_line_exit_2(ran, argv, command, option, value):
    line = _one_error_line(ran[tuple(argv)])
    assert option in line and f"`{command} --help`" in line, line
    if value is not None:
        assert f"'{value}'" in line, line


def test_every_command_is_covered():
    words = {" ".join(w) for w, _ in commands()}
    assert {"predict", "kv", "simulate", "search", "capture show", "profiles hardware"} <= words
    with_values = {c.values[1] for c in CASES if c.values[3] is not None}
    for name in ("predict", "kv", "simulate", "search", "analyze", "align", "work", "profile", "import"):
        assert f"graphsim {name}" in with_values, name


def test_did_you_mean():
    line = _one_error_line(run_cli(["predict", "llama-3.1-8b", "--batc", "decode:1x8"]))
    assert "no such option --batc" in line and "did you mean --batch" in line


def test_version():
    from importlib.metadata import version

    proc = run_cli(["--version"])
    assert proc.returncode == 0 and proc.stdout.strip() == f"graphsim {version('graphsim')}", proc


def test_missing_optional_dependency_names_its_extra():
    code = ("import sys\nsys.modules['torch'] = None  # as if torch were not installed\n"
            "from graphsim.cli.app import main\nsys.exit(main(['--no-cache', 'predict', 'llama-3.1-8b']))\n")
    # --no-cache: a graph cached by an earlier test is priced without torch (as it should be); this is the trace
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    line = _one_error_line(proc)
    assert "torch" in line and "pip install 'graphsim[trace]'" in line and "graphsim predict" in line, line


@pytest.mark.parametrize(("module", "extra"), [
    ("torch", "trace"), ("transformers", "trace"), ("onnx", "onnx"), ("aiconfigurator", "aiconfigurator"),
    ("yaml", "aiconfigurator"), ("ray", "ray"), ("matplotlib", "plot"),
])
def test_each_extra_is_named(module, extra):
    from graphsim.cli.app import _missing_module_message

    message = _missing_module_message(ModuleNotFoundError(f"No module named '{module}'", name=module),
                                      "graphsim x")
    assert message is not None and f"pip install 'graphsim[{extra}]'" in message, message


def test_own_module_missing_is_a_bug_not_an_install_problem():
    from graphsim.cli.app import _missing_module_message

    assert _missing_module_message(ModuleNotFoundError(name="graphsim.nowhere"), "graphsim x") is None


@pytest.mark.parametrize("argv", [
    ["search", "llama-3.1-8b", "--gpus", "2", "--ttft", "-5"],
    ["search", "llama-3.1-8b", "--gpus", "2", "--tpot", "0"],
    ["simulate", "llama-3.1-8b", "-n", "5", "--slo-ttft-ms", "nan"],
    ["sweep", "llama-3.1-8b", "--rates", "1", "--slo-e2e-ms", "-1"],
])
def test_a_latency_bound_must_be_positive(argv):
    # a bound of 0 ms or less (or NaN) can never be met: refused, not searched against silently
    proc = subprocess.run([sys.executable, "-m", "graphsim", *argv], capture_output=True, text=True, timeout=120)
    line = _one_error_line(proc)
    assert "is not a positive, finite time" in line, line
