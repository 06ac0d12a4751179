"""vLLM's default compiled mode (graphsim/passes/fuse/vllm_inductor.py, the `inductor` pass): the kernels Inductor
generates between the opaque ones, against the custom-op path `--enforce-eager` keeps.

The expected counts are Inductor's own (torch 2.13's scheduler with vLLM's combo kernels, counted by
benchmarks/inductor_regions.py on the same regions): a Llama layer 4 generated kernels (as many as the custom-op
path), Qwen3's q/k norms one combo kernel and its rotary one, Gemma-4's q/k/v norms one and its rotary one, the
region after Gemma-4's o_proj all-reduce one (6 custom-op kernels), after its MoE / MLP all-reduces one (5)."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.cost_model import pipeline_for
from graphsim.importers.hf import import_hf
from graphsim.ir import Op
from graphsim.ir.geometry import ElementwiseGeometry, NormGeometry, RotaryGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes import run_pipeline
from graphsim.passes.fuse.vllm_inductor import NAME, fuses, generated
from tests.passes.passes_helpers import tiny_config
from tests.passes.test_fuse_elementwise_rules import TINY_DSV3, TINY_GEMMA4


def _graphs(name: str, cfg: dict, tp: int = 1):
    g, _ = import_hf(ResolvedModel(name, copy.deepcopy(cfg), "path", "test"), cache=False)
    eager = run_pipeline(g, pipeline_for("vllm", tp, compiled=False)).graph
    return eager, run_pipeline(g, pipeline_for("vllm", tp)).graph


def _kernels(g, layer=None):
    return [n for n in g.nodes if n.op is Op.KERNEL and (layer is None or n.layer == layer)]


def _sig(g):
    return [(n.name, n.kernel.kind, n.kernel.name, n.kernel.geometry, n.inputs) for n in _kernels(g)]


def test_pipeline_runs_inductor_in_compiled_mode_only():
    assert pipeline_for("vllm", 8, 8) == "fold,fuse{target=vllm},tp{size=8},ep{size=8},inductor"
    assert pipeline_for("vllm", 8, compiled=False) == "fold,fuse{target=vllm},tp{size=8}"
    assert pipeline_for("sglang", 2) == "fold,fuse{target=sglang},tp{size=2}"  # vLLM's compile config only


def test_llama_layer_is_unchanged():
    """Each of a Llama layer's regions is one kernel either way: the compiled graph is the custom-op one."""
    eager, compiled = _graphs("tiny-llama", tiny_config("llama-3.1-8b", num_hidden_layers=2), tp=2)
    assert _sig(compiled) == _sig(eager)


def test_qwen3_qk_norms_become_one_kernel_before_the_rotary():
    cfg = tiny_config("qwen3-8b", num_hidden_layers=2, head_dim=16)
    eager, compiled = _graphs("tiny-qwen3", cfg)
    layer = _kernels(eager)[2].layer
    before = [n.kernel.name for n in _kernels(eager, layer)]
    after = [n.kernel.name for n in _kernels(compiled, layer)]
    assert before.count("rms_norm") == 3 and "rotary_embedding" in before  # the input norm, q_norm, k_norm
    assert after.count(NAME) == 1 and after.count("rms_norm") == 1 and "rotary_embedding" in after
    assert len(after) == len(before) - 1
    merged = next(n for n in _kernels(compiled, layer) if n.kernel.name == NAME)
    # reads the packed GEMM's q and k outputs once (4 heads x 16 = 64 and 2 x 16 = 32 elements a token; v, its
    # third output, goes to the attention) and writes the normalized q and k (64 + 32): 96 + 96 = 192 a token
    assert merged.kernel.geometry == ElementwiseGeometry(width=192, reads=0)
    assert "2 custom-op kernels (rms_norm, rms_norm)" in merged.kernel.rule


def test_gemma4_regions():
    eager, compiled = _graphs("tiny-gemma4", TINY_GEMMA4)
    for layer in (0, 1):
        merged = [n.kernel.rule.split("; ")[1].split(" in one")[0] for n in _kernels(compiled, layer)
                  if n.kernel.name == NAME]
        assert merged == ["3 custom-op kernels (rms_norm, rms_norm, rms_norm)",
                          "6 custom-op kernels (rms_norm, fused_add_rms_norm, rms_norm, mul, mul, rms_norm)",
                          "5 custom-op kernels (rms_norm, rms_norm, fused_add_rms_norm, add, mul)"]
        # 14 custom-op kernels become 3, and the input norm goes into the layer's tail kernel (across_layers: the
        # previous layer's tail and this norm are one Inductor region): 12 fewer a layer; the rotary and the gated
        # activation stay
        assert len(_kernels(eager, layer)) - len(_kernels(compiled, layer)) == 12
        kinds = [n.kernel.kind for n in _kernels(compiled, layer)]
        assert KernelKind.ROTARY in kinds and KernelKind.ACT_AND_MUL in kinds and KernelKind.RMS_NORM not in kinds
        assert "with the next layer's input norm (rms_norm)" in _kernels(compiled, layer)[-1].kernel.rule
    # the first layer's post-MoE region: reads the MLP's and the MoE's all-reduced outputs... (tp 1: their outputs)
    # and the residual (32 each), writes the layer's output (32): 4 x 32 = 128 elements a token; plus the next
    # layer's input norm's output (32): 160
    tail = [n for n in _kernels(compiled, 0) if n.kernel.name == NAME][2]
    assert tail.kernel.geometry == ElementwiseGeometry(width=160, reads=0)
    # it stands for its 5 custom-op kernels and the next layer's input norm
    assert [m.name for m in tail.kernel.merged] == ["rms_norm", "rms_norm", "fused_add_rms_norm", "add", "mul",
                                                    "rms_norm"]
    # the qkv GEMM reads the layer's input (the norm is counted in the tail kernel)
    assert next(n for n in _kernels(compiled, 0) if n.kernel.name == "qkv_proj").inputs[0] == "mul"


def test_merged_kernel_bytes_are_the_ranks():
    """The tp pass shards the kernels' geometries, not the value specs: at TP 2 the tiny Gemma-4's q/k/v norm kernel
    moves the rank's heads. Its first layer (4 q heads, 2 KV heads of 8): 2 q heads and 1 KV head a rank, reads
    q, k, v (16 + 8 + 8) and writes them: 64 elements a token (128 at TP 1, test_gemma4_regions' 32 x 4 region
    of the hidden size stays 160 with the next layer's input norm: the hidden size is whole on every rank)."""
    _, compiled = _graphs("tiny-gemma4", TINY_GEMMA4, tp=2)
    merged = [n.kernel.geometry for n in _kernels(compiled, 0) if n.kernel.name == NAME]
    assert merged == [ElementwiseGeometry(width=64, reads=0), ElementwiseGeometry(width=192, reads=0),
                      ElementwiseGeometry(width=160, reads=0)]


@pytest.mark.slow
def test_mla_blocks_keep_their_kernels():
    """DeepSeek's MLA norms stay as they are (only the MoE layer's add + norm and router cast merge)."""
    eager, compiled = _graphs("tiny-dsv3", TINY_DSV3)
    gone = {n.name for n in _kernels(eager)} - {n.name for n in _kernels(compiled)}
    assert len(gone) == 1
    merged = [n for n in _kernels(compiled) if n.kernel.name == NAME]
    assert len(merged) == 1 and "(fused_add_rms_norm, cast)" in merged[0].kernel.rule


def test_fusion_rule():
    norm = KernelAttrs(KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=512, dim=512), "bf16")
    head_norm = KernelAttrs(KernelKind.RMS_NORM, "rms_norm", NormGeometry(width=512, dim=128), "bf16")
    rotary = KernelAttrs(KernelKind.ROTARY, "rotary_embedding",
                         RotaryGeometry(num_heads=3, num_kv_heads=1, head_dim=128, rot_dim=128), "bf16")
    add = KernelAttrs(KernelKind.ELEMENTWISE, "add", ElementwiseGeometry(width=512), "bf16")
    act = KernelAttrs(KernelKind.ACT_AND_MUL, "silu_and_mul", ElementwiseGeometry(width=512, in_width=1024), "bf16")
    assert fuses(norm, norm) and fuses(add, norm) and fuses(norm, add)
    assert not fuses(head_norm, norm)  # another reduction length (rnumel)
    assert not fuses(head_norm, rotary)  # the rotary reads the normalized head at the rotated index
    assert fuses(act, KernelAttrs(KernelKind.ELEMENTWISE, "mul", ElementwiseGeometry(width=512), "bf16"))
    assert not fuses(add, KernelAttrs(KernelKind.ELEMENTWISE, "mul", ElementwiseGeometry(width=256), "bf16"))
    # kernels that stay custom ops / Triton kernels in compiled mode, and per-sequence work, are not generated
    assert not generated(KernelAttrs(KernelKind.RMS_NORM, "rms_norm_gated", NormGeometry(width=512, dim=512), "bf16"))
    assert not generated(KernelAttrs(KernelKind.ELEMENTWISE, "fused_gdn_gating", ElementwiseGeometry(width=8), "f32"))
    assert not generated(KernelAttrs(KernelKind.ELEMENTWISE, "mul", ElementwiseGeometry(width=8), "bf16",
                                     Rows.SEQUENCES))
    assert generated(add) and generated(norm) and generated(rotary)


@pytest.mark.slow
def test_predict_prices_compiled_mode_unless_enforce_eager(tmp_path):
    """`predict` prices the compiled graph; `--enforce-eager` the custom-op one: 12 kernels a layer more on the tiny
    Gemma-4 (its two layers: 24; test_gemma4_regions), each merged kernel an elementwise row of its external bytes."""
    import json

    from typer.testing import CliRunner

    from graphsim.cli.app import _register, app

    _register()
    (tmp_path / "config.json").write_text(json.dumps(TINY_GEMMA4))
    out = {}
    for flags in ((), ("--enforce-eager",)):
        res = CliRunner().invoke(app, ["predict", str(tmp_path), "--batch", "decode:8x128", "--json", *flags])
        assert res.exit_code == 0, res.output
        out[flags] = json.loads(res.stdout)["batches"][0]["kernels"]
    compiled, eager = out[()], out[("--enforce-eager",)]
    assert len(eager) - len(compiled) == 24
    assert not any(k["kernel"] == NAME for k in eager)
    merged = [k for k in compiled if k["kernel"] == NAME]
    assert len(merged) == 6 and all(k["kind"] == "elementwise" for k in merged)
    # the first layer's post-FFN region with the next input norm: 160 elements a token (test_gemma4_regions) x 2
    # bytes (bf16) x 8 tokens
    assert next(k for k in merged if k["node"] == "L0.rms_norm_6")["bytes"] == 160 * 2 * 8


def test_without_combo_kernels_independent_kernels_stay_apart():
    """vLLM 0.11 (torch < 2.9) has no combo kernels: Gemma-4's q, k and v norms stay three kernels and the rotary
    is two (Inductor's count for the input norm to the attention without them, benchmarks/inductor_regions.py
    --backend triton: 6 = input norm 1 + q/k/v norms 3 + q/k rotary 2; the input norm is counted in the previous
    layer's tail kernel, across_layers); the connected norm chains after the all-reduces are still one each."""
    g, _ = import_hf(ResolvedModel("tiny-gemma4", copy.deepcopy(TINY_GEMMA4), "path", "test"), cache=False)
    graph = run_pipeline(g, "fold,fuse{target=vllm},inductor{combo=0}").graph
    merged = [n.kernel.rule.split("; ")[1].split(" in one")[0] for n in _kernels(graph, 0) if n.kernel.name == NAME]
    assert merged == ["no combo kernels: rotary_embedding q half", "no combo kernels: rotary_embedding k half",
                      "6 custom-op kernels (rms_norm, fused_add_rms_norm, rms_norm, mul, mul, rms_norm)",
                      "5 custom-op kernels (rms_norm, rms_norm, fused_add_rms_norm, add, mul)"]
    names = [n.kernel.name for n in _kernels(graph, 0)]
    assert names.count("rms_norm") == 3 and "rotary_embedding" not in names  # q, k, v
    attn_in = names[:names.index("flash_attn_varlen")]
    assert attn_in == ["qkv_proj", "rms_norm", "rms_norm", "rms_norm", NAME, NAME]  # 5 generated + the input norm
    # TINY_GEMMA4's first layer: 4 q heads and 2 KV heads of 8, rot_dim 16 (its geometry): the q half reads the
    # normalized q (4 x 8 = 32 a token) and cos / sin (16), writes q (32): 80; the k half 2 x 8 = 16: 16 + 16 + 16
    halves = [n.kernel.geometry for n in _kernels(graph, 0) if "half" in n.kernel.rule]
    assert halves == [ElementwiseGeometry(width=80, reads=0), ElementwiseGeometry(width=48, reads=0)]


def test_without_combo_kernels_the_rotary_is_two_kernels():
    """Inductor's Llama layer without combo kernels: 5 generated kernels (benchmarks/inductor_regions.py --backend
    triton, torch 2.13: llama_layer 5; with --combo 4): the rotary of q and of k apart, each priced by its own
    bytes; the attention reads the halves' outputs and v straight from the qkv GEMM."""
    g, _ = import_hf(ResolvedModel("tiny-llama", tiny_config("llama-3.1-8b", num_hidden_layers=2), "path", "test"),
                     cache=False)
    graph = run_pipeline(g, "fold,fuse{target=vllm},tp{size=2},inductor{combo=0}").graph
    layer = 0  # the folded layer
    kernels = _kernels(graph, layer)
    assert [n.kernel.name for n in kernels] == ["rms_norm", "qkv_proj", NAME, NAME, "flash_attn_varlen", "o_proj",
                                                "all_reduce", "fused_add_rms_norm", "gate_up_proj", "silu_and_mul",
                                                "down_proj", "all_reduce"]
    q, k, attn = kernels[2], kernels[3], kernels[4]
    # tiny Llama (4 q heads, 2 KV heads of 16, rot_dim 16) at TP 2: 2 q heads and 1 KV head a rank: q reads
    # 2 x 16 = 32 and cos / sin (16), writes 32: 80 a token; k: 16 + 16 + 16 = 48
    assert q.kernel.geometry == ElementwiseGeometry(width=80, reads=0)
    assert k.kernel.geometry == ElementwiseGeometry(width=48, reads=0)
    assert q.inputs == ("L0.qkv_proj",) and k.inputs == ("L0.qkv_proj#1",)
    assert attn.inputs == (q.name, f"{k.name}", "L0.qkv_proj#2")
    # with combo kernels (vLLM >= 0.12) the layer keeps its custom-op rotary
    combo = run_pipeline(g, "fold,fuse{target=vllm},tp{size=2},inductor").graph
    assert [n.kernel.name for n in _kernels(combo, layer)].count("rotary_embedding") == 1


def test_qwen3_without_combo_kernels():
    """Qwen3's q/k norms and rotary without combo kernels: 4 generated kernels (benchmarks/inductor_regions.py
    --backend triton: qwen3_attn_in 4; 2 with --combo), the custom-op path's 3 (two norms, one rotary)."""
    cfg = tiny_config("qwen3-8b", num_hidden_layers=2, head_dim=16)
    g, _ = import_hf(ResolvedModel("tiny-qwen3", cfg, "path", "test"), cache=False)
    graph = run_pipeline(g, "fold,fuse{target=vllm},inductor{combo=0}").graph
    layer = _kernels(graph)[2].layer
    names = [n.kernel.name for n in _kernels(graph, layer)]
    assert names[:names.index("flash_attn_varlen")] == ["rms_norm", "qkv_proj", "rms_norm", "rms_norm", NAME, NAME]


def test_engine_version_picks_the_mode():
    """V0 compiled nothing (custom-op kernels), V1 before 0.12 compiles without combo kernels, 0.12 on with them."""
    from graphsim.serving.engine_versions import parse_engine

    modes = {v: (parse_engine(v).compiled, parse_engine(v).combo_kernels)
             for v in ("vllm==0.6.3", "vllm==0.10.1", "vllm==0.11.0", "vllm==0.12.0", "vllm==0.19.0", "sglang")}
    assert modes == {"vllm==0.6.3": (False, False), "vllm==0.10.1": (True, False), "vllm==0.11.0": (True, False),
                     "vllm==0.12.0": (True, True), "vllm==0.19.0": (True, True), "sglang": (False, False)}
    assert pipeline_for("vllm", 2, combo=False) == "fold,fuse{target=vllm},tp{size=2},inductor{combo=0}"
