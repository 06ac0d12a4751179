"""benchmarks/architectures_e2e.py's config list and tally (the run itself is the script's, minutes a config set):
every distinct real config once, issue 16's families first and its list last, and a per-command tally that counts
what the rows say."""

from __future__ import annotations

import json

import pytest


def test_every_distinct_config_once_families_first(benchmark_script):
    pytest.importorskip("aiconfigurator_core")
    e2e = benchmark_script("architectures_e2e")
    found = e2e.all_configs()
    paths = [p for _, p in found]
    assert len(paths) == len(set(paths))
    names = [n for n, _ in found]
    # the list's configs close the run, in any order
    listed = [n for n in e2e.CONFIGS if (e2e._model_configs() / f"{n}_config.json").is_file()]
    assert sorted(names[-len(listed):]) == sorted(listed)
    # a family config off the list (Kimi-K2.5's text model is kimi_k2, as Kimi-K2-Instruct) comes before any
    # config of another family (Mixtral)
    assert names.index("moonshotai--Kimi-K2.5") < names.index("mistralai--Mixtral-8x7B-v0.1")
    # identical files are one config: graphsim's catalog copy of aiconfigurator's DeepSeek-V3 is dropped
    assert "deepseek-ai--DeepSeek-V3" in names and "DeepSeek-V3" not in names
    # a hf_quant_config beside a config makes it a different config (Qwen3-32B vs its static fp8 twin)
    assert {"Qwen--Qwen3-32B", "Qwen--Qwen3-32B-FP8-Static-PerTensor"} <= set(names)
    for _, p in found:
        assert isinstance(json.loads(p.read_text()), dict)


def test_the_tally_counts_each_command_and_the_bar(benchmark_script):
    e2e = benchmark_script("architectures_e2e")
    ok = {"status": "ok", "placeholder_share_pct": 0.0, "over_roofline_sum": 1.5, "over_weight_floor": 2.0}
    rows = [
        {"kv": {"status": "ok"}, "tp8": dict(ok), "simulate": {"status": "error"}},
        {"kv": {"status": "traceback"}, "tp8": dict(ok, placeholder_share_pct=3.0, over_roofline_sum=4.0),
         "tp8_ep8": dict(ok, over_weight_floor=0.9), "simulate": {"status": "ok"}},
        # over the bar as a stated exception (measured rows vLLM runs that slow): counted apart
        {"kv": {"status": "ok"}, "tp8": dict(ok, over_roofline_sum=4.2, exception="4.20x ... through measured rows")},
    ]
    got = e2e.summary(rows)
    assert got["kv"] == {"ok": 2, "error": 0, "traceback": 1}
    assert got["tp8"] == {"ok": 3, "error": 0, "traceback": 0, "placeholders>1%": 1, ">3x roofline": 1,
                          ">3x roofline, stated": 1, "<weight floor": 0}
    assert got["tp8_ep8"] == {"ok": 1, "error": 0, "traceback": 0, "placeholders>1%": 0, ">3x roofline": 0,
                              ">3x roofline, stated": 0, "<weight floor": 1}
    assert got["simulate"] == {"ok": 1, "error": 1, "traceback": 0}
