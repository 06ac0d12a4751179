"""Trace files are checked line by line at the boundary: NaN, negative or missing values are named."""

from __future__ import annotations

import pytest

from graphsim.serving.requests import WorkloadSpecError, load_trace


@pytest.mark.parametrize("line, needles", [
    ('{"arrival_s": NaN, "input_tokens": 10, "output_tokens": 5}', ["arrival_s: input should be a finite number"]),
    ('{"arrival_s": -1, "input_tokens": 0, "output_tokens": 5}',
     ["arrival_s: input should be greater than or equal to 0", "input_tokens: input should be greater than or equal to 1"]),
    ('{"arrival_s": 0, "input_tokens": 10.5, "output_tokens": 5}', ["input_tokens:"]),
    ('[1, 2, 3]', ["(document)"]),
    ('{"arrival_s": 0, "input_tokens": 10', ["not JSON"]),
])
def test_bad_lines_are_named_with_every_problem(tmp_path, line, needles):
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_s": 0, "input_tokens": 10, "output_tokens": 5}\n' + line + "\n")
    with pytest.raises(WorkloadSpecError) as e:
        load_trace(p)
    msg = str(e.value)
    assert "\n" not in msg and f"{p}:2" in msg
    for needle in needles:
        assert needle in msg


def test_extra_keys_are_ignored_and_prefix_ids_may_be_numbers(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"arrival_s": 1.5, "input_tokens": 10, "output_tokens": 5, "request_id": "r1", '
                 '"prefix_id": 7, "prefix_tokens": 4}\n')
    (r,) = load_trace(p)
    assert (r.arrival_s, r.input_tokens, r.output_tokens, r.prefix_id, r.prefix_tokens) == (1.5, 10, 5, "7", 4)


def test_a_binary_file_is_one_line(tmp_path):
    p = tmp_path / "model.onnx"
    p.write_bytes(b"\x08\x07\x12\x00\xff\xfe\x00")
    with pytest.raises(WorkloadSpecError, match="not UTF-8 text"):
        load_trace(p)
