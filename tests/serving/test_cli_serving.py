"""graphsim kv and graphsim simulate end to end."""

import json

import pytest

from graphsim.cli.app import main


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "200")


def test_kv_prints_layout_budget_and_vllm_lines(capsys):
    assert main(["kv", "llama-3.1-8b", "--gpu", "h100", "--tp", "1"]) == 0
    out = capsys.readouterr().out
    assert "131,072 B" in out and "2 (K,V) × 8 kv heads × 128 × 2 B" in out
    for term in ("weights", "activation peak", "runtime overhead", "CUDA graphs", "available for KV"):
        assert term in out
    assert "GPU KV cache size:" in out and "Maximum concurrency for 131,072 tokens per request:" in out
    assert "estimated" in out and "assumed" in out


def test_kv_json_and_given_memory(capsys):
    assert main(["kv", "gpt-oss-20b", "--gpu", "h100", "--max-model-len", "32768", "--kv-memory", "10GiB",
                 "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["memory"]["source"] == "given" and d["memory"]["available_bytes"] == 10 * 2**30
    assert d["capacity"]["num_blocks"] == 27_306 and d["capacity"]["blocks_per_request"] == 3_081
    assert d["capacity"]["vllm_log"] == ["GPU KV cache size: 290,413 tokens",
                                         "Maximum concurrency for 32,768 tokens per request: 8.86x"]
    kinds = {p["kind"]: p for p in d["layout"]["parts"]}
    assert kinds["sliding"]["window"] == 128 and kinds["full"]["bytes_per_token"] == 12 * 2048


def test_kv_fp8_and_tp(capsys):
    assert main(["kv", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--kv-dtype", "fp8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["layout"]["bytes_per_token_per_rank"] == 61 * 576 and d["engine"]["block_size"] == 64
    assert d["memory"]["available_bytes"] > 0


def test_kv_errors_are_one_line(capsys):
    assert main(["kv", "llama-3.1-8b", "--tp", "3"]) == 2
    err = capsys.readouterr().err
    # 32 heads at tp 3: vLLM's own refusal, as predict quotes it (graphsim/vllm_checks.py)
    assert "must be divisible by tensor parallel size (3)" in err and len(err.strip().splitlines()) == 1
    assert main(["kv", "llama-3.1-8b", "--kv-memory", "plenty"]) == 2
    assert "cannot read memory size" in capsys.readouterr().err


def test_simulate_needs_one_workload(capsys):
    assert main(["simulate", "llama-3.1-8b"]) == 2
    assert "give exactly one workload" in capsys.readouterr().err


def test_simulate_end_to_end(capsys, tmp_path):
    pytest.importorskip("torch")
    log, trace = tmp_path / "it.csv", tmp_path / "trace.json"
    code = main(["simulate", "llama-3.1-8b", "--gpu", "h100", "--rate", "4", "-n", "60", "--max-model-len", "8192",
                 "--slo-ttft-ms", "1000", "--slo-tpot-ms", "30", "--iteration-log", str(log), "--chrome-trace",
                 str(trace), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    d = json.loads(out.out)
    s = d["summary"]
    assert s["completed"] == 60 and s["source"] == "roofline" and s["all_roofline"]
    assert "roofline estimate" in d["data"]
    assert s["ttft_ms"]["mean"] > 0 and s["tpot_ms"]["p50"] <= s["tpot_ms"]["p99"]
    assert s["slo_attained"] is not None and s["goodput_requests_per_s"] <= s["requests_per_s"] + 1e-9
    rows = log.read_text().splitlines()
    assert rows[0].startswith("start_s,dur_s,tokens") and len(rows) == s["iterations"] + 1
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == s["iterations"]
    assert {e["name"] for e in events if e.get("cat") == "request"} == {"front end", "queued", "prefill", "decode"}
