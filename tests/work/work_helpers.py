"""Helpers shared by the work-accountant tests (a plain module: tests/ has its own conftest)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from graphsim.work import accounting, parse_step


def load_config(stem: str) -> dict:
    return json.loads((resources.files("graphsim.catalog") / "configs" / f"{stem}.json").read_text())


def catalog_stems() -> list[str]:
    folder = resources.files("graphsim.catalog") / "configs"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def buckets(stem: str, prefill=(), decode=(), **precision) -> dict:
    """The golden buckets of one step: matmul and attention FLOPs, parameter and state bytes."""
    r = accounting(load_config(stem), **precision).step(parse_step(list(prefill), list(decode)))
    t = r.total
    return {
        "matmul_flops": r.matmul_flops,
        "attention_flops": r.attention_flops,
        "param_read_bytes": t.param_read_bytes,
        "param_read_bytes_worst": t.param_read_bytes_worst,
        "state_read_bytes": t.state_read_bytes,
        "state_write_bytes": t.state_write_bytes,
    }


def check(got: dict, want: dict) -> None:
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-12, abs=0), key
