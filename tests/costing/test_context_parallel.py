"""Context parallel (costing/context_parallel.py): the ring's composition by hand, conservation of attention work
and KV over ranks, the size checks, and the CLI (-pcp / -dcp)."""

import json
import math

import numpy as np
import pytest

from graphsim.costing.context_parallel import ContextParallel, ContextParallelError, kv_bytes_per_token, ring_time_us
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows
from graphsim.costing.roofline import kernel_work
from graphsim.ir.geometry import AttentionGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import SeqGroup, Step


def test_ring_of_two_ranks_is_the_sum_of_each_rounds_longer_stream():
    # 2 ranks, the last one's view: round 0 attends its own causal diagonal (10 µs) while sending its KV chunk
    # (15 µs); round 1 attends the received chunk as a full block (20 µs) and sends nothing.
    # Parallel(compute, send) per round, Sum over rounds: max(10, 15) + max(20, 0) = 15 + 20 = 35 µs
    assert ring_time_us(np.array([10.0, 20.0]), np.array([15.0, 0.0])) == pytest.approx(35.0)
    # a link fast enough to hide every send: the ring is the attention alone, 10 + 20 = 30 µs
    assert ring_time_us(np.array([10.0, 20.0]), np.array([4.0, 0.0])) == pytest.approx(30.0)


GQA = AttentionGeometry(num_heads=32, num_kv_heads=8, head_dim=128, v_head_dim=128, window=0, causal=True)


def _flops(step: Step) -> float:
    attrs = KernelAttrs(KernelKind.ATTENTION, "attention", GQA, "bf16", Rows.NONE)
    kr = kernel_rows(attrs, StepArrays.of([step]), Dtypes())
    total = 0.0
    for part in kr.parts:
        w = kernel_work(part.key, part.coords)
        assert w is not None
        total += float(np.sum(w.flops) * part.weight)
    return total


@pytest.mark.parametrize("ranks", [2, 4])
def test_ring_conserves_the_attention_flops_over_ranks(ranks):
    # a prefill of n = 8192 tokens split in P chunks of c = n/P: rank i attends its diagonal and i full blocks,
    # priced as the prefill of c tokens after i·c cached ones; over all ranks that is every (query, key) pair of
    # the whole causal prefill once: Σ_i [c·i·c + c(c+1)/2] = n(n+1)/2 pairs
    n = 8192
    c = n // ranks
    per_rank = [_flops(Step((SeqGroup(c, i * c, 1),))) for i in range(ranks)]
    assert sum(per_rank) == pytest.approx(_flops(Step((SeqGroup(n, 0, 1),))), rel=1e-12)
    # and the last rank carries the most: the plain split is unbalanced
    assert per_rank[-1] == max(per_rank)


def test_kv_is_sharded_not_lost():
    # DCP 4: each rank holds ceil(ctx / 4) tokens of every sequence; 4 ranks hold all 32768 (= 4 × 8192)
    cp = ContextParallel(pcp=1, dcp=4)
    assert cp.kv_capacity_factor == 4
    assert 4 * math.ceil(32768 / 4) == 32768
    # the bytes a token adds per layer: K and V of 8 heads of 128, bf16: 8 × (128 + 128) × 2 = 4096 B
    assert kv_bytes_per_token(GQA, 2.0) == 4096
    # MLA: the latent (512) and rope key (64), bf16: 576 × 2 = 1152 B
    mla = AttentionGeometry(num_heads=16, num_kv_heads=16, head_dim=192, v_head_dim=128, window=0, causal=True,
                            kv_lora_rank=512, qk_rope_head_dim=64)
    assert kv_bytes_per_token(mla, 2.0) == 1152


def test_sizes_are_checked_with_the_fix_named():
    with pytest.raises(ContextParallelError, match="must divide the tensor-parallel size 4"):
        ContextParallel(dcp=3).check(4)
    with pytest.raises(ContextParallelError, match=">= 1"):
        ContextParallel(pcp=0).check(1)
    ContextParallel(pcp=2, dcp=2).check(4)


# --- the CLI -------------------------------------------------------------------------------------------------
@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))


@pytest.mark.slow
def test_cli_predict_prefill_context_parallel(capsys, isolated_home):
    from graphsim.cli.app import main

    code = main(["predict", "llama-3.1-8b", "--gpu", "h200", "--tp", "2", "-pcp", "2", "-b", "prefill:1x8192",
                 "-b", "decode:8x1024", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    cp = json.loads(out.out)["context_parallel"]
    assert (cp["prefill_context_parallel_size"], cp["world_size"], cp["kv_capacity_factor"]) == (2, 4, 2)
    (b,) = cp["batches"]  # the decode batch is not a prefill: pcp leaves it alone
    assert b["spec"] == "prefill:1x8192" and len(b["rounds"]) == 2
    assert b["rounds"][1]["send_us"] == 0 and b["rounds"][0]["send_us"] > 0
    # Parallel per round, Sum over rounds (one attention geometry: the per-layer rings add up to the rounds')
    assert b["attention_us"] == pytest.approx(sum(r["time_us"] for r in b["rounds"]), rel=1e-9)
    assert b["total_us"] < b["baseline_us"]


def test_cli_bad_decode_context_parallel_is_one_line_exit_2(capsys, isolated_home):
    from graphsim.cli.app import main

    code = main(["predict", "llama-3.1-8b", "--gpu", "h200", "--tp", "4", "-dcp", "3", "-b", "decode:8x1024"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--decode-context-parallel-size 3 must divide the tensor-parallel size 4" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
