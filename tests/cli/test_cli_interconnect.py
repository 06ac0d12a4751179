"""The interconnect options (--interconnect, --link-bandwidth, --gpus-per-node, --network-*) on predict,
simulate and search: bad values are one-line errors before any work; the collective's note in --json."""

import json

import pytest

from graphsim.cli.app import main


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("cmd", [["predict", "llama-3.1-8b"], ["simulate", "llama-3.1-8b", "--concurrency", "1"],
                                 ["search", "llama-3.1-8b"]])
def test_unknown_link_kind_is_a_usage_error(capsys, cmd):
    assert main([*cmd, "--interconnect", "infiniband"]) == 2
    err = capsys.readouterr().err
    assert "infiniband" in err and "nvswitch, nvlink, pcie-p2p, pcie" in err and "Traceback" not in err


def test_nvlink_on_a_pcie_gpu_needs_a_bandwidth(capsys):
    assert main(["predict", "llama-3.1-8b", "--gpu", "l40s", "--interconnect", "nvlink"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "--link-bandwidth" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_tp_across_nodes_in_predict_json(capsys):
    pytest.importorskip("torch")
    code = main(["predict", "llama-3.1-8b", "--gpu", "h200", "--tp", "2", "--gpus-per-node", "1",
                 "--batch", "prefill:1x1024", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    (batch,) = json.loads(out.out)["batches"]
    ar = [k for k in batch["kernels"] if k["kind"] == "all_reduce"]
    assert ar and all(k["source"] == "roofline" and "spans nodes" in k["note"] for k in ar)
    # 1024 tokens × 4096 × 2 B = 8 MiB over two 1-GPU nodes: 5 µs + the network's 10 µs on each of NCCL's
    # 2·(2 − 1) = 2 network steps of an all-reduce (costing/network.py network_steps) + 2·1/2 · 8388608 / 50e9 s
    # = 25 + 167.772 = 192.772 µs
    assert ar[0]["time_us"] == pytest.approx(192.77216)
