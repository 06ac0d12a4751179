"""Pipeline parallelism on vLLM's compiled graph: the tensors a stage hands on come from the model's forward, not from
which kernels Inductor generates (passes/fuse/vllm_inductor.py merges Gemma-4's fused add + norms into generated
kernels; the residual still travels with the hidden states)."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.costing.pipeline import intermediate_tensors
from graphsim.ir import Op
from graphsim.ir.kernel import KernelKind
from tests.passes.test_vllm_inductor import TINY_GEMMA4, _graphs


@pytest.mark.slow  # two pipelines over a traced tiny Gemma-4: ~18 s on 2 shared cores
def test_compiled_gemma4_still_sends_the_residual():
    eager, compiled = _graphs("tiny-gemma4", TINY_GEMMA4)
    # compiled, no fused add + norm is left a kernel of its own in the layers: each is in a generated kernel
    assert not any(n.op is Op.KERNEL and n.layer is not None and n.kernel.kind is KernelKind.FUSED_ADD_RMS_NORM
                   for n in compiled.nodes)
    assert any(m.kind is KernelKind.FUSED_ADD_RMS_NORM for n in compiled.nodes if n.op is Op.KERNEL
               for m in n.kernel.merged)
    # hidden size 32 (TINY_GEMMA4), bf16: hidden_states and residual in both modes
    assert intermediate_tensors(eager).names == intermediate_tensors(compiled).names == ("hidden_states", "residual")
    assert intermediate_tensors(compiled).width == 32
