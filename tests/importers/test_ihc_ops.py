"""HunYuan-V4's independent hyper-connections (iHC: pre and post gates, no comb, no Sinkhorn) as semantic ops:
transformers' eager logits on a tiny random model, one node per gate in the trace, vLLM's triton_ihc_pre /
triton_ihc_post kernels kept whole at tp 2 (vLLM's hc_fn is a ReplicatedLinear), and their work derived by hand."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hyv4_helpers import TINY_HYV4  # noqa: E402

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.costing import compressed  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.importers.hf.build import make_hf_config, model_class  # noqa: E402
from graphsim.importers.hf.compressed_ops import compressed_patches  # noqa: E402
from graphsim.ir import Op  # noqa: E402
from graphsim.ir.geometry import ElementwiseGeometry  # noqa: E402
from graphsim.ir.kernel import KernelAttrs  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402


def test_ihc_ops_match_eager_logits():
    torch.manual_seed(0)
    custom_ops.register()
    model = model_class("HYV4ForCausalLM")._from_config(make_hf_config(copy.deepcopy(TINY_HYV4)),
                                                        dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():  # transformers initialises the gate biases to constants: give them values
        for name, p in model.named_parameters():
            if name.endswith((".base", "hc_base")):
                p.normal_(0, 0.5)
    ids = torch.randint(0, 96, (1, 9))
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
        with compressed_patches(model) as swapped:
            got = model(input_ids=ids, use_cache=False).logits
        # the comparison covers the post gates: moving one layer's post bias moves transformers' logits
        model.model.layers[1].ffn_hc.base[3:].normal_(0, 5.0)
        moved = model(input_ids=ids, use_cache=False).logits
    assert {s.rsplit(".", 2)[-2] for s in swapped} == {"HYV4HyperConnection", "HYV4DecoderLayer", "HYV4HyperHead"}
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert (moved - want).abs().max() > 1e-4  # the logits are ~0.1 (initializer_range 0.006)


@pytest.fixture(scope="module")
def graph():
    return import_hf(ResolvedModel("tiny-hyv4", copy.deepcopy(TINY_HYV4), "path", "test"), cache=False)[0]


def _kernels(g, layer: int) -> dict[str, KernelAttrs]:
    return {n.name.split(".", 1)[1]: n.attrs_as(KernelAttrs) for n in g.nodes if n.op is Op.KERNEL and n.layer == layer}


def test_trace_has_one_node_per_gate_and_vllm_kernels_stay_whole_at_tp2(graph):
    for layer in (0, 1):
        hc = [n.target for n in graph.nodes if n.op is Op.HYPER_CONNECTION and n.layer == layer]
        assert hc == ["graphsim::ihc_pre", "graphsim::ihc_post"] * 2  # attention block, then MLP block
    assert [n.target for n in graph.nodes if n.op is Op.HYPER_CONNECTION and n.layer is None] == ["graphsim::hc_head"]
    fused = run_pipeline(copy.deepcopy(graph), "fuse{target=vllm}").graph
    for tp in (1, 2):
        g = fused if tp == 1 else run_pipeline(copy.deepcopy(fused), "tp{size=2}").graph
        k = _kernels(g, 0)
        # 3 streams of 64: the whole n·D = 192 per token on every rank (ReplicatedLinear hc_fn in vLLM)
        assert k["triton_ihc_pre/n3.d64"].geometry_as(ElementwiseGeometry).width == 192
        assert k["triton_ihc_post/n3.d64"].geometry_as(ElementwiseGeometry).width == 192
        assert not any(a.approximate for name, a in k.items() if "ihc" in name)


def test_ihc_work_by_hand():
    rows = np.array([10.0])

    def work(op: str) -> tuple[list[float], list[float]]:
        w = compressed.work(op, rows, 2.0)
        assert w is not None
        return list(w[0]), list(w[1])

    # triton_ihc_pre at 4 streams of 4096, a token: fn projection 2·8·16384 = 262,144, sum of squares 2·16384 and
    # the collapse 2·16384 → 327,680 FLOPs. Streams read twice 2·16384·2 B + output 4096·2 B = 73,728 B, post 4·4 B
    # = 16 B, partials ceil(16384 / 1024) = 16 splits × (1 + 2·4) = 9 fp32 written and read: 2·16·9·4 = 1,152 B
    # → 74,896 B
    assert work("triton_ihc_pre/n4.d4096") == ([3276800.0], [748960.0])
    # triton_ihc_post: post·x + stream, 2·4·4096 = 32,768 FLOPs; x 4096 + streams 16384 read + 16384 written, ×2 B
    # = 73,728 B, plus 4 fp32 gates 16 B → 73,744 B
    assert work("triton_ihc_post/n4.d4096") == ([327680.0], [737440.0])
    # 3 streams: next_pow2(3) = 4, so partials are (1 + 8) values too: ceil(3·64 / 1024) = 1 split → 2·1·9·4 = 72 B
    # plus (2·3 + 1)·64·2 = 896 B and 3·4 = 12 B → 980 B
    assert work("triton_ihc_pre/n3.d64")[1] == [9800.0]
    state = compressed.state_bytes("triton_ihc_post/n4.d4096", rows)  # activations only: no cache or state
    assert state is not None and list(state) == [0.0]
