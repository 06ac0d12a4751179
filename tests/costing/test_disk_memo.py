"""Figures computed from a profile.db are kept on disk until the profile file or the computing code changes."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from graphsim.costing.disk_memo import memo


@dataclass(frozen=True)
class Rates:
    floor_us: float
    rows: int
    source: str


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GRAPHSIM_NO_CACHE", raising=False)
    profile = tmp_path / "p.db"
    profile.write_bytes(b"rows")
    code = tmp_path / "code.py"
    code.write_text("v1")
    calls: list[int] = []

    def compute() -> Rates:
        calls.append(1)
        return Rates(3.02, len(calls), "p.db")

    return profile, code, calls, compute


def test_second_call_reads_the_stored_value(setup, tmp_path):
    profile, code, calls, compute = setup
    first = memo("rates", profile, ("h200",), compute, Rates, [str(code)])
    again = memo("rates", profile, ("h200",), compute, Rates, [str(code)])
    assert first == again == Rates(3.02, 1, "p.db") and len(calls) == 1
    assert len(list((tmp_path / "home" / "cache" / "profile").glob("rates-*.json"))) == 1
    memo("rates", profile, ("h100",), compute, Rates, [str(code)])  # another key: computed
    assert len(calls) == 2


def test_a_changed_profile_or_code_is_computed_again(setup):
    profile, code, calls, compute = setup
    memo("rates", profile, "k", compute, Rates, [str(code)])
    st = profile.stat()
    os.utime(profile, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # an import into the profile
    assert memo("rates", profile, "k", compute, Rates, [str(code)]) == Rates(3.02, 2, "p.db")
    code.write_text("v2")
    memo("rates", profile, "k", compute, Rates, [str(code)])
    assert len(calls) == 3


def test_none_damage_and_opt_out(setup, tmp_path, monkeypatch):
    profile, code, calls, compute = setup
    assert memo("none", profile, "k", lambda: None, Rates, [str(code)]) is None
    assert memo("none", profile, "k", compute, Rates, [str(code)]) is None and not calls  # None was stored
    memo("rates", profile, "k", compute, Rates, [str(code)])
    (entry,) = (tmp_path / "home" / "cache" / "profile").glob("rates-*.json")
    entry.write_text('{"floor_us": ')  # damaged: computed again
    assert memo("rates", profile, "k", compute, Rates, [str(code)]) == Rates(3.02, 2, "p.db")
    monkeypatch.setenv("GRAPHSIM_NO_CACHE", "1")
    memo("rates", profile, "k", compute, Rates, [str(code)])
    assert len(calls) == 3
