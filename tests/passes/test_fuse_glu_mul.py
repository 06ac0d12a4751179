"""BitNet's gated MLP, `down(sub_norm(relu2(gate(x)) * up(x)))`, as vLLM's Transformers backend (its only vLLM path)
runs it: the gate and up projections one merged GEMM, relu² one activation kernel, and the product one `mul` kernel,
since GLUFuser builds an act-and-mul kernel only for the activations vLLM registers and relu2 is not one
(graphsim/passes/fuse/vllm_elementwise.py GLU_MUL). Nothing is left an approximate placeholder."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir import Op
from graphsim.ir.geometry import ElementwiseGeometry, GemmGeometry
from graphsim.ir.kernel import KernelAttrs
from graphsim.passes import run_pipeline

# hidden 32, MLP width 48, 4 heads of 8, one layer
TINY_BITNET = {
    "architectures": ["BitNetForCausalLM"], "model_type": "bitnet", "torch_dtype": "bfloat16", "vocab_size": 96,
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
    "num_key_value_heads": 4, "hidden_act": "relu2", "max_position_embeddings": 256, "pad_token_id": 0,
    "bos_token_id": 1, "eos_token_id": 2,
}


def test_bitnet_mlp_kernels():
    g, _ = import_hf(ResolvedModel("tiny-bitnet", copy.deepcopy(TINY_BITNET), "path", "test"), cache=False)
    fused = run_pipeline(copy.deepcopy(g), "fuse{target=vllm}").graph
    by = {n.name: n for n in g.nodes}
    ks = [n.attrs_as(KernelAttrs) for n in fused.nodes if n.op is Op.KERNEL]
    assert [(k.name, k.covers) for k in ks if k.approximate] == []
    mlp = [k for k in ks if by[k.covers[0]].scope.startswith("model.layers.0.mlp")]
    assert [k.name for k in mlp] == ["gate_up_proj", "relu2", "mul", "rms_norm", "down_proj"]
    assert mlp[0].geometry_as(GemmGeometry) == GemmGeometry(n=96, k=32)  # gate 48 + up 48 from the hidden 32
    mul = mlp[2]
    assert (mul.rule, mul.geometry_as(ElementwiseGeometry).width, mul.dtype) == ("glu_mul", 48, "bf16")
    # it multiplies the activation by the up projection
    assert {by[v].op for v in by[mul.covers[0]].inputs} == {Op.POW, Op.LINEAR}
