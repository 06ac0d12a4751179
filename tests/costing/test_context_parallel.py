"""Context parallel (costing/context_parallel.py): the ring's composition by hand, conservation of attention work
and KV over ranks, the size checks, and the CLI (-pcp / -dcp)."""

import json
import math

import numpy as np
import pytest

from graphsim.costing.context_parallel import (
    ContextParallel, ContextParallelError, kv_bytes_per_token, pcp_attention, ring_time_us,
)
from graphsim.costing.cost_tree import Leaf, compile_tree, price_leaves
from graphsim.costing.hardware import load_hardware
from graphsim.costing.interpolate import MEASURED, KernelPricer
from graphsim.costing.kernel_map import Dtypes, StepArrays, kernel_rows
from graphsim.costing.kernels import AttentionPrefillKey, CollectiveKey
from graphsim.costing.roofline import kernel_work
from graphsim.ir.geometry import AttentionGeometry, CollectiveGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.workload import SeqGroup, Step


class PairPricer(KernelPricer):
    """Attention at 1e-4 µs per (query, key) pair, every collective (the ring's send) at 60 µs: hand arithmetic."""

    def __init__(self) -> None:
        super().__init__(None, load_hardware("h200"))

    def times(self, key, coords):
        c = np.asarray(coords, dtype=np.float64).reshape(len(coords), -1)
        if isinstance(key, AttentionPrefillKey):  # (batch, q_len, kv_len): q·(kv − q) + q(q + 1)/2 pairs each
            b, q, kv = c[:, 0], c[:, 1], c[:, 2]
            t = b * (q * (kv - q) + q * (q + 1) / 2) * 1e-4
        else:
            assert isinstance(key, CollectiveKey)
            t = np.full(len(c), 60.0)
        return t, np.full(len(c), MEASURED, dtype=np.int8)


def test_ring_tree_of_two_ranks_by_hand():
    # a 2048-token prefill on 2 ranks, chunks of c = 1024; the last rank:
    #   round 0: its causal diagonal, 1024·1025/2 = 524,800 pairs = 52.48 µs, overlapping the 60 µs KV send
    #   round 1: one full block against chunk 0, 2048-key minus 1024-key prefill = 1024² = 1,048,576 pairs
    #            = 104.8576 µs, nothing to send
    # Parallel per round, Sum over rounds: max(52.48, 60) + 104.8576 = 164.8576 µs
    leaf = Leaf("attn", KernelAttrs(KernelKind.ATTENTION, "attention", GQA, "bf16", Rows.NONE), 0)
    tree = compile_tree(pcp_attention(leaf, 2, 2.0))
    ev = tree.evaluate([Step((SeqGroup(2048, 0, 1),))], PairPricer(), Dtypes())
    assert ev.total_us()[0] == pytest.approx(164.8576, rel=1e-12)
    # the overlap hides the 52.48 µs of round 0's attention behind its send
    assert ev.hidden_us()[0, 0] == pytest.approx(52.48, rel=1e-12)
    # conservation: the last rank's ring does the work of a 1024-token chunk after 1024 cached tokens
    flops, _ = ev.leaf_work()
    ring = [i for i, lf in enumerate(tree.leaves) if ".ring" in lf.name and not lf.name.endswith("send")]
    assert flops[ring, 0].sum() == pytest.approx(_flops(Step((SeqGroup(1024, 1024, 1),))), rel=1e-12)


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
    doc = json.loads(out.out)
    cp = doc["context_parallel"]
    assert (cp["prefill_context_parallel_size"], cp["world_size"], cp["kv_capacity_factor"]) == (2, 4, 2)
    prefill, decode = doc["batches"]
    nodes = {k["node"]: k for k in prefill["kernels"]}
    # every attention layer type is a 2-round ring: round 0 overlaps its KV send, round 1 sends nothing
    assert {"L0.flash_attn_varlen.ring0", "L0.flash_attn_varlen.ring0.send", "L0.flash_attn_varlen.ring1"} <= set(nodes)
    assert nodes["L0.flash_attn_varlen.ring0.send"]["total_us"] > 0
    assert any(o["overlap"].startswith("ring round 0") for o in prefill["overlaps"])
    # a decode batch uses no ring: its attention reads the rank's KV shard and combines the partial outputs
    dnodes = {k["node"]: k for k in decode["kernels"]}
    assert dnodes["L0.flash_attn_varlen.ring0"]["total_us"] == 0
    assert dnodes["L0.flash_attn_varlen.pcp_combine"]["total_us"] > 0


def test_cli_bad_decode_context_parallel_is_one_line_exit_2(capsys, isolated_home):
    from graphsim.cli.app import main

    code = main(["predict", "llama-3.1-8b", "--gpu", "h200", "--tp", "4", "-dcp", "3", "-b", "decode:8x1024"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--decode-context-parallel-size 3 must divide the tensor-parallel size 4" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


# --- decode context parallel as a tree transformation ---------------------------------------------------------
def _mla_graph(tp: int = 2, mla: bool = True):
    """One layer: an MLA attention kernel (per rank at tp: 128 / tp heads; latent 512 + rope 64) and an o_proj;
    `mla` False: GQA with 8 KV heads split over tp (no copies)."""
    from graphsim.ir import DType, Graph, LayerSchedule, Node, Op, T, TensorSpec
    from graphsim.ir.geometry import GemmGeometry

    x = TensorSpec((1, T, 64), DType.BFLOAT16)
    geo = AttentionGeometry(num_heads=128 // tp, num_kv_heads=128 // tp, head_dim=192, v_head_dim=128, window=0,
                            causal=True, kv_lora_rank=512, qk_rope_head_dim=64) if mla else \
        AttentionGeometry(num_heads=128 // tp, num_kv_heads=8 // tp, head_dim=128, v_head_dim=128, window=0, causal=True)
    g = Graph("toy-mla", inputs={"x": x})
    g.nodes = [Node("L0.attn", Op.KERNEL, ("x",), (x,), KernelAttrs(KernelKind.ATTENTION, "mla_attention", geo, "bf16",
                                                                     Rows.NONE), layer=0),
               Node("L0.o_proj", Op.KERNEL, ("L0.attn",), (x,),
                    KernelAttrs(KernelKind.GEMM, "o_proj", GemmGeometry(n=7168, k=128 // tp * 128), "bf16"), layer=0)]
    g.outputs = ["L0.o_proj"]
    g.schedule = LayerSchedule(("a",) * 4, {"a": 0})
    g.meta.tp = tp
    g.meta.fuse_target = "vllm"
    g.verify()
    return g


def test_dcp_shards_the_kv_gathers_the_heads_and_adds_the_combine():
    from graphsim.costing.context_parallel import with_decode_context_parallel
    from graphsim.costing.cost_model import CostModel
    from graphsim.costing.hardware import load_hardware

    cm = CostModel.of_kernel_graph(_mla_graph(tp=2), load_hardware("h200"))
    dcp = with_decode_context_parallel(cm, 2)
    names = [lf.name for lf in dcp.tree.leaves]
    assert names == ["L0.attn.dcp_q", "L0.attn", "L0.attn.dcp_lse", "L0.attn.dcp_out", "L0.o_proj"]
    attn = dcp.tree.leaves[1]
    assert attn.kv_shards == 2 and attn.attrs.geometry_as(AttentionGeometry).num_heads == 128  # 64 per rank × 2
    # the q all-gather carries the D ranks' absorbed queries: 128 heads × (512 + 64) bf16 = 147,456 B per token
    q = dcp.tree.leaves[0].attrs.geometry_as(CollectiveGeometry)
    assert (q.num_gpus, q.bytes_per_row) == (2, 128 * 576 * 2)
    # the sharded attention reads half of each context: priced as the gathered heads at ceil(4097 / 2) = 2049
    step = Step((SeqGroup(1, 4097, 8),))
    t_dcp, _ = price_leaves([attn], [step], cm.pricer, cm.dtypes)
    t_ref, _ = price_leaves([Leaf("ref", attn.attrs)], [Step((SeqGroup(1, 2049, 8),))], cm.pricer, cm.dtypes)
    assert t_dcp[0, 0] == pytest.approx(t_ref[0, 0], rel=1e-12)
    # KV conserved over ranks: the two shards' attention reads ceil(4097 / 2) × 2 = 4098 ≥ 4097 tokens' latents
    _, nbytes = dcp.evaluate([step]).leaf_work()
    whole = cm.evaluate([Step((SeqGroup(1, 4097, 8),))]).leaf_work()[1][0, 0]  # 64 heads, the whole context
    assert 2 * nbytes[1, 0] >= whole
    assert np.isfinite(dcp.evaluate([step]).total_us()[0])


def test_dcp_beyond_the_kv_copies_is_refused():
    from graphsim.costing.context_parallel import with_decode_context_parallel
    from graphsim.costing.cost_model import CostModel
    from graphsim.costing.hardware import load_hardware

    cm = CostModel.of_kernel_graph(_mla_graph(tp=2), load_hardware("h200"))
    with pytest.raises(ContextParallelError, match="must divide the tensor-parallel size 2"):
        with_decode_context_parallel(cm, 4)
    # GQA with its 8 KV heads split over 2 ranks holds no copy to shard
    gqa = CostModel.of_kernel_graph(_mla_graph(tp=2, mla=False), load_hardware("h200"))
    with pytest.raises(ContextParallelError, match="can be at most 1"):
        with_decode_context_parallel(gqa, 2)


def test_sharded_capacity_holds_dcp_times_the_tokens_in_the_same_memory():
    from graphsim.serving.capacity import KvCapacity
    from graphsim.serving.config import ParallelConfig
    from graphsim.serving.context_parallel import sharded_capacity

    cap = KvCapacity(available_bytes=1000 * 4096, bytes_per_block=4096, num_blocks=1000, max_model_len=4096,
                     blocks_per_request=256, in_flight_tokens=8192, block_size=16)
    s = sharded_capacity(cap, ParallelConfig(tensor_parallel_size=8, decode_context_parallel_size=4), tp=8)
    # each rank stores a quarter of every block: 4 × 1000 blocks of 16 tokens at 1024 B per rank = the same 4 MB
    assert (s.num_blocks, s.bytes_per_block, s.available_bytes) == (4000, 1024, cap.available_bytes)
    assert s.max_concurrency == pytest.approx(4 * cap.max_concurrency)
    # vLLM's logical block spans dcp × pcp ranks' pages (single_type_kv_cache_manager.py): 2 × 2 = 4 as well
    both = ParallelConfig(tensor_parallel_size=8, decode_context_parallel_size=2, prefill_context_parallel_size=2)
    assert sharded_capacity(cap, both, tp=8).num_blocks == 4000
    assert both.world_size == 16  # pcp adds ranks, dcp does not
    assert sharded_capacity(cap, ParallelConfig(tensor_parallel_size=8), tp=8) is cap


@pytest.mark.slow
def test_cli_simulate_prefill_context_parallel_halves_a_long_prefill(capsys, isolated_home):
    from graphsim.cli.app import main

    def ttft(pcp: int) -> tuple[float, int]:
        code = main(["simulate", "llama-3.1-8b", "--gpu", "h200", "-pcp", str(pcp), "--concurrency", "1",
                     "--input-len", "16384", "--output-len", "4", "--num-prompts", "2", "--json"])
        out = capsys.readouterr()
        assert code == 0, out.err
        doc = json.loads(out.out)
        assert doc["summary"]["gpus"] == pcp  # pcp adds ranks
        return doc["summary"]["ttft_ms"]["mean"], doc["deployment"]["capacity"]["num_blocks"]

    (t1, b1), (t2, b2) = ttft(1), ttft(2)
    assert b2 == 2 * b1  # the KV sharded over 2 ranks: twice the blocks of 16 tokens per rank
    # per-token kernels at half the tokens and a 2-round ring: well under the single-rank prefill, above half of it
    # (round 1's full block costs more than the diagonal, and the sends add)
    assert t1 / 2 < t2 < 0.75 * t1


def _kv_tokens(capsys, *args: str) -> tuple[int, str]:
    from graphsim.cli.app import main

    code = main(["kv", *args, "--gpu", "h200", "--json"])
    out = capsys.readouterr()
    if code:
        return code, out.err
    doc = json.loads(out.out)
    return 0, str((doc.get("capacity") or doc["deployment"]["capacity"])["tokens"])


def test_cli_kv_dcp_shards_the_kv_and_refuses_what_vllm_refuses(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    # MLA: every TP rank holds the whole latent, so dcp 8 at tp 8 holds 8× the tokens in the same memory
    _, one = _kv_tokens(capsys, "deepseek-v3", "--tp", "8")
    _, eight = _kv_tokens(capsys, "deepseek-v3", "--tp", "8", "-dcp", "8")
    assert int(eight) == 8 * int(one)
    # GQA with 8 KV heads: at tp 2 no rank holds a copy (refused); at tp 16 two ranks hold each head (allowed)
    code, err = _kv_tokens(capsys, "llama-3.1-8b", "--tp", "2", "-dcp", "2")
    assert code == 2 and "can be at most 1" in err and len(err.strip().splitlines()) == 1
    assert _kv_tokens(capsys, "llama-3.1-8b", "--tp", "16", "-dcp", "2")[0] == 0
    # a hybrid model's per-request state is not sharded: refused by name
    code, err = _kv_tokens(capsys, "qwen3-next-80b-a3b", "--tp", "4", "-dcp", "2")
    assert code == 2 and "state layers is not modelled" in err
