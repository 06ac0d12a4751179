"""Zamba2's leftover ops (issue 16: 4.1 % of its tiny decode step in approximate placeholders) as the kernels vLLM's
port launches (graphsim/passes/fuse/vllm_zamba2.py); the tiny config of tests/passes/test_zamba2_tp.py."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from passes_helpers import ZAMBA2

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir.geometry import ElementwiseGeometry
from graphsim.ir.kernel import KernelAttrs, Rows
from graphsim.passes import run_pipeline


@pytest.mark.slow
def test_concatenate_adapter_add_and_clone_are_the_ports_kernels():
    graph, _ = import_hf(ResolvedModel("tiny-zamba2", dict(ZAMBA2), "path", "test"), cache=False)
    fused = run_pipeline(graph, "fold,fuse{target=vllm}").graph
    kernels = [n for n in fused.nodes if isinstance(n.attrs, KernelAttrs)]
    assert not [n.name for n in kernels if n.kernel.approximate]
    mine = {(n.kernel.name, n.layer): n.kernel for n in kernels if n.kernel.rule == "zamba2_ops"}
    assert set(mine) == {("cat", 1), ("add", 1), ("copy", None)}
    # torch.concatenate([hidden, original]): 2 x 64 = 128 features a token (read and written once)
    assert mine[("cat", 1)].geometry_as(ElementwiseGeometry) == ElementwiseGeometry(width=128)
    # gate_up (2 x 96 = 192) + the LoRA output (192): two reads of 192, one write
    assert mine[("add", 1)].geometry_as(ElementwiseGeometry) == ElementwiseGeometry(width=192, reads=2)
    # torch.clone of the 64-wide embeddings, once per token of the step
    clone = mine[("copy", None)]
    assert clone.geometry_as(ElementwiseGeometry).width == 64 and clone.rows is Rows.TOKENS
