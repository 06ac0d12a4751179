"""Attention classes picked from a table without graphsim's entry (graphsim/importers/hf/table_attention.py):
GPT-Neo's global / local attention and GIT's text self-attention trace as `graphsim::attention`: tiny models'
logits equal transformers' eager ones, the attention nodes' scale / window by hand, the fuse to vLLM's kernels with no
placeholder (GIT's unread integer mask bookkeeping absorbed, passes/fuse/vllm_dead.py) and TP 2."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel  # noqa: E402
from graphsim.importers.hf import custom_ops, import_hf  # noqa: E402
from graphsim.importers.hf.alibi_ops import register_attention_tables  # noqa: E402
from graphsim.ir import AttentionAttrs, Op  # noqa: E402
from graphsim.ir.kernel import KernelAttrs  # noqa: E402
from graphsim.passes import run_pipeline  # noqa: E402

# GPT-Neo: a global then a local layer, a window of 4 keys (the test sequences are longer), head size 8
TINY_GPT_NEO = {
    "architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "hidden_size": 32, "num_layers": 2,
    "num_heads": 4, "attention_types": [[["global", "local"], 1]], "window_size": 4, "vocab_size": 128,
    "max_position_embeddings": 1024, "intermediate_size": 64, "bos_token_id": 0, "eos_token_id": 0,
}
# GIT (text path): 2 BERT-style post-norm layers of 4 heads of 8; the vision tower is built but not traced
TINY_GIT = {
    "architectures": ["GitForCausalLM"], "model_type": "git", "hidden_size": 32, "num_hidden_layers": 2,
    "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 128, "max_position_embeddings": 1024,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    "vision_config": {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                      "image_size": 32, "patch_size": 16},
}
CASES = {"gpt_neo": TINY_GPT_NEO, "git": TINY_GIT}


@pytest.fixture(scope="module", params=sorted(CASES))
def imported(request):
    cfg = CASES[request.param]
    return request.param, import_hf(ResolvedModel(f"tiny-{request.param}", copy.deepcopy(cfg), "path", "test"),
                                    cache=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tiny_model_logits_unchanged_by_the_swap(name):
    from graphsim.importers.hf.build import make_hf_config, model_class

    custom_ops.register()
    register_attention_tables()
    cfg = CASES[name]
    torch.manual_seed(0)
    cls = model_class(cfg["architectures"][0])
    eager = cls._from_config(make_hf_config(copy.deepcopy(cfg)), dtype=torch.float32, attn_implementation="eager")
    eager.eval()
    ours = cls._from_config(make_hf_config(copy.deepcopy(cfg)), dtype=torch.float32,
                            attn_implementation=custom_ops.IMPL_NAME).eval()
    ours.load_state_dict(eager.state_dict())
    ids = torch.randint(3, 128, (2, 9))  # 9 tokens: past GPT-Neo's local window of 4
    with torch.no_grad():
        ref = eager(input_ids=ids, use_cache=False).logits
        with custom_ops.semantic_kernels(ours) as swapped:
            got = ours(input_ids=ids, use_cache=False).logits
    assert any(s.endswith(("GPTNeoSelfAttention.forward", "GitSelfAttention.forward")) for s in swapped), swapped
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)


def test_attention_nodes(imported):
    name, (g, report) = imported
    # (GIT's forward guards on the token count: the importer's static fallback, T read back from a prime probe)
    assert report.dynamic_tokens == (name == "gpt_neo") and report.opaque_ops == {}
    attn = {n.layer: n.attrs_as(AttentionAttrs) for n in g.nodes if n.op is Op.ATTENTION}
    got = {layer: (a.num_heads, a.num_kv_heads, a.head_dim, a.causal, a.sliding_window, a.scale)
           for layer, a in attn.items()}
    if name == "gpt_neo":  # no 1/√d scale; layer 1 local with window_size 4
        assert got == {0: (4, 4, 8, True, None, 1.0), 1: (4, 4, 8, True, 4, 1.0)}
    else:  # 1/√8; one layer type traced
        assert got == {0: (4, 4, 8, True, None, pytest.approx(8 ** -0.5))}


def test_fuse_and_tp2(imported):
    name, (g, _) = imported
    fused = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    ks = [n.attrs_as(KernelAttrs) for n in fused.nodes if n.op is Op.KERNEL]
    assert not [k.name for k in ks if k.approximate], [k.name for k in ks]
    if name == "git":
        # GitModel.forward: where(zeros_like(...)[..., 0] == 1, 0, -1), group_ids nothing reads under graphsim's
        # attention (no mask): before passes/fuse/vllm_dead.py, `eq` and `where` were unpriced int / bool placeholders
        # (simulate: time missing); now no kernel covers them
        dead = {n.name for n in g.nodes if n.op.value in ("compare", "where") and n.layer is None}
        assert dead and not dead & {c for k in ks for c in k.covers}
        for target in ("sglang", "trtllm"):  # no engine launches a kernel for them
            other = run_pipeline(copy.deepcopy(g), f"fold,fuse{{target={target}}}").graph
            assert not dead & {c for n in other.nodes if n.op is Op.KERNEL for c in n.attrs_as(KernelAttrs).covers}
    assert sum(k.kind.value == "attention" for k in ks) == len(g.schedule.representative)
    run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2}")  # the conservation check runs inside
