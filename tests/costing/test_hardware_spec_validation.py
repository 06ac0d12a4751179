"""A hardware spec file is checked at the boundary: every problem named at once, one line, exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from graphsim.costing.errors import HardwareSpecError
from graphsim.costing.hardware import HardwareSpec, list_hardware, load_hardware


def _spec(**changes) -> dict:
    data = load_hardware("h100").to_json()
    data.update(changes)
    return data


def test_every_shipped_spec_passes_and_round_trips():
    for spec in list_hardware():
        assert HardwareSpec.from_json(spec.to_json()) == spec


def test_all_problems_are_named_at_once():
    bad = _spec(memory_bytes=-5, memory_bandwidth_bytes_per_s=float("nan"), devices_per_nod=8)
    bad["peak_dense_flops_per_s"] = {"bf16": 1e15, "fp7": 3.0}
    with pytest.raises(HardwareSpecError) as e:
        HardwareSpec.from_json(bad, "lab.json")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("malformed hardware spec lab.json: ")
    assert "memory_bytes: input should be greater than 0 (got -5)" in msg
    assert "memory_bandwidth_bytes_per_s: input should be a finite number" in msg
    assert "peak_dense_flops_per_s.fp7" in msg
    assert "devices_per_nod: unknown field" in msg  # a typo is not silently ignored


@pytest.mark.parametrize("field, value", [
    ("memory_bandwidth_bytes_per_s", 3.35e16),  # bits for bytes × 10: past 1 PB/s
    ("memory_bytes", 0),
    ("interconnect_latency_us", -1.0),
    ("devices_per_node", 0),
])
def test_out_of_range_values_are_refused(field, value):
    with pytest.raises(HardwareSpecError, match=field):
        HardwareSpec.from_json(_spec(**{field: value}))


def test_a_missing_field_is_named():
    data = _spec()
    del data["memory_bytes"]
    with pytest.raises(HardwareSpecError, match="memory_bytes: field required"):
        HardwareSpec.from_json(data)


def test_cli_reports_a_bad_file_in_one_line(tmp_path):
    nan_file = tmp_path / "nan.json"
    nan_file.write_text(json.dumps(_spec(memory_bandwidth_bytes_per_s=float("nan"))))  # json writes NaN
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    for path, needle in [(nan_file, "finite number"), (binary, "not UTF-8")]:
        r = subprocess.run([sys.executable, "-m", "graphsim", "kv", "llama-3.1-8b", "--gpu", str(path)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2, r.stderr
        assert needle in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
