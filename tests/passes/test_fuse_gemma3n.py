"""Gemma-3n's leftover ops (issue 16: 38 % of its tiny decode step in approximate placeholders) as the kernels vLLM's
port launches (graphsim/passes/fuse/vllm_gemma3n.py), and the two no-kernel cases PyTorch decides; a hand-written
4-layer config (hidden 64, 4 AltUp streams, per-layer inputs of 16, sparsity on layer 0 only)."""

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.costing.dtypes import KernelDtype
from graphsim.costing.kernel_map import elementwise_op
from graphsim.costing.kernels import ElementwiseKey
from graphsim.costing.roofline import kernel_work
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes import run_pipeline

GEMMA3N = {
    "architectures": ["Gemma3nForCausalLM"], "model_type": "gemma3n_text", "hidden_size": 64,
    "intermediate_size": [128] * 4, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1,
    "head_dim": 16, "layer_types": ["sliding_attention"] * 3 + ["full_attention"],
    "activation_sparsity_pattern": [0.95, 0.0, 0.0, 0.0], "num_kv_shared_layers": 0, "vocab_size": 256,
    "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 16, "laurel_rank": 8, "altup_num_inputs": 4,
    "sliding_window": 64, "max_position_embeddings": 512, "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def fused():  # tracing the tiny model takes ~25 s on 2 cores: its users are marked slow
    graph, _ = import_hf(ResolvedModel("tiny-gemma3n", dict(GEMMA3N), "path", "test"), cache=False)
    folded = run_pipeline(graph, "fold").graph
    return folded, run_pipeline(graph, "fold,fuse{target=vllm}").graph


def _kernels(graph, layer: int | str = "any"):
    return [n for n in graph.nodes if isinstance(n.attrs, KernelAttrs) and (layer == "any" or n.layer == layer)]


def _covering(graph, node_name):
    return [n for n in _kernels(graph) if node_name in n.kernel.covers]


@pytest.mark.slow
def test_no_placeholder_is_left(fused):
    _, graph = fused
    assert not [n.name for n in _kernels(graph) if n.kernel.approximate]


@pytest.mark.slow
def test_same_dtype_casts_and_self_copies_launch_nothing(fused):
    folded, graph = fused
    layer0 = [n for n in folded.nodes if n.layer == 0]
    # transformers' AltUp ends predict / correct with .type_as(hidden_states) on a bf16 tensor: bf16 -> bf16 casts
    made = {n.name: n for n in folded.nodes}
    noops = [n for n in layer0 if n.op.value == "cast" and n.target == "aten::type_as"
             and n.inputs[0] in made and n.outputs[0].dtype is made[n.inputs[0]].outputs[0].dtype]
    assert len(noops) >= 2
    assert all(not _covering(graph, n.name) for n in noops)
    # the real casts (bf16 router logits -> f32 for tanh, and back) stay kernels: 2 per modality computation
    casts = [n for n in _kernels(graph, 0) if n.kernel.name == "cast"]
    assert [n.kernel.dtype for n in casts] == ["f32", "bf16", "f32", "bf16"]
    # corrected_predictions[1:] += first_prediction: the add_ is a kernel, the copy_ back into the slice is not
    copies = [n for n in layer0 if n.target == "aten::copy_"]
    assert len(copies) == 1 and not _covering(graph, copies[0].name)
    # the sparsity's per-forward scalar constants (vLLM: std_multiplier computed in __init__)
    scalars = [n for n in layer0 if n.target == "aten::lift_fresh_copy"]
    assert scalars and all(not _covering(graph, n.name) for n in scalars)


@pytest.mark.slow
def test_altup_kernels_and_their_bytes(fused):
    _, graph = fused
    k0 = [n.kernel for n in _kernels(graph, 0) if n.kernel.rule == "gemma3n_ops"]
    geo = {(k.name, k.geometry_as(ElementwiseGeometry).width): k.geometry_as(ElementwiseGeometry) for k in k0}
    # predict: one bmm over the 4 streams x 64 = 256 features a token, then predictions += hidden_states (two reads)
    assert geo[("bmm", 256)].reads is None
    assert geo[("add", 256)].reads == 2
    # correct: innovation = activated - predictions[0] (two 64-wide reads); the per-layer input mul (two 16-wide)
    assert geo[("sub", 64)].reads == 2
    assert geo[("mul", 16)].reads == 2
    # the sparsity threshold: mean and std reduce the 128 gate features to one value a token
    assert geo[("mean", 1)].in_width == 128 and geo[("std", 1)].in_width == 128
    assert all(k.kind is KernelKind.ELEMENTWISE and k.rows is Rows.TOKENS for k in k0)


def test_a_binary_kernel_is_priced_for_both_reads():
    # add of two token tensors of 256 bf16 features at 4 tokens: 2 reads + 1 write = 3 x 4 x 256 x 2 B = 6144 B
    # (a read-once kernel of the same width moves 2 x 4 x 256 x 2 = 4096 B)
    k = KernelAttrs(KernelKind.ELEMENTWISE, "add", ElementwiseGeometry(width=256, reads=2), "bf16", Rows.TOKENS,
                    ("add_",), "gemma3n_ops")
    op = elementwise_op(k)
    assert op == "add/r2"
    work = kernel_work(ElementwiseKey(op, 256, KernelDtype("bf16")), np.array([[4]]))
    assert work is not None and work.bytes.tolist() == [6144.0]
    plain = kernel_work(ElementwiseKey("add", 256, KernelDtype("bf16")), np.array([[4]]))
    assert plain is not None and plain.bytes.tolist() == [4096.0]


def test_the_profiler_times_a_two_read_key_as_its_binary_op():
    # `add/r2` is the same kernel the profiler's table times as a binary add of two [tokens, width] tensors
    from graphsim.profiles.profiler.pointwise import _select

    k = KernelAttrs(KernelKind.ELEMENTWISE, "add", ElementwiseGeometry(width=256, reads=2), "bf16", Rows.TOKENS,
                    ("add_",), "gemma3n_ops")
    key = ElementwiseKey(elementwise_op(k), 256, KernelDtype("bf16"))
    _build, label, _ = _select(k, key)
    assert label == "aten::add"
