"""The KV layout read off the traced graph (graphsim/serving/graph_kv.py) against the accountant's, per layer.

Each family is a tiny config traced on the meta device; the accountant builds its spec from the same config. Both
must give the same kind, bytes per token, state bytes and window on every layer that keeps KV, at each tp; the
hand-derived totals in the comments pin the common value so that a shared mistake cannot pass.
"""

import copy
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel, resolve_model
from graphsim.cli.app import main
from graphsim.importers.hf import import_hf
from graphsim.serving.graph_kv import SOURCE, accountant_lacks, graph_blind_spots, graph_kv_layout
from graphsim.serving.kv_layout import KvKind, KvLayoutError, kv_layout
from graphsim.work import accounting


def tiny(name: str, **overrides) -> ResolvedModel:
    cfg = copy.deepcopy(resolve_model(name).config)
    cfg.pop("quantization_config", None)
    cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, vocab_size=97,
               max_position_embeddings=256)
    cfg.update(overrides)
    return ResolvedModel(f"tiny-{name}", cfg, "path", "test")


def both(model: ResolvedModel, tp: int, kv_dtype: str | None = None):
    acc = accounting(model.config, kv_dtype=kv_dtype)
    want = kv_layout(acc.spec, acc.precision, tp)
    graph, _ = import_hf(model, cache=False)
    got = graph_kv_layout(graph, acc.precision.kv, acc.precision.state, tp)
    return got, want


def same_layers(got, want):
    """Per layer: kind, bytes per token, state bytes, window; and the paging built on them."""
    key = [(la.kind, la.bytes_per_token, la.state_bytes, la.window) for la in got.layers]
    assert key == [(la.kind, la.bytes_per_token, la.state_bytes, la.window) for la in want.layers]
    assert got.groups == want.groups and got.block_size == want.block_size
    assert got.source == SOURCE and want.source == "config accountant"
    assert any("traced graph" in n for n in got.notes)


@pytest.fixture(scope="module")
def llama_graph():
    model = tiny("llama-3.1-8b", num_hidden_layers=2, head_dim=16)
    return model, import_hf(model, cache=False)[0]


def test_llama_gqa_matches_accountant_at_each_tp(llama_graph):
    model, graph = llama_graph
    for tp, kv in ((1, None), (2, None), (4, None), (1, "fp8")):
        acc = accounting(model.config, kv_dtype=kv)
        got = graph_kv_layout(graph, acc.precision.kv, acc.precision.state, tp)
        same_layers(got, kv_layout(acc.spec, acc.precision, tp))
    acc = accounting(model.config)
    # 2 layers × 2 (K, V) × 2 kv heads × 16 × 2 B = 256 B per token at tp 1; tp 2: 1 head per rank = 128 B;
    # tp 4 > 2 kv heads: vLLM keeps max(1, 2 // 4) = 1 (replicated) = 128 B
    assert graph_kv_layout(graph, acc.precision.kv, acc.precision.state, 1).bytes_per_token == 2 * 2 * 2 * 16 * 2 == 256
    assert graph_kv_layout(graph, acc.precision.kv, acc.precision.state, 4).bytes_per_token == 2 * 2 * 1 * 16 * 2 == 128
    with pytest.raises(KvLayoutError, match="tp = 3"):
        graph_kv_layout(graph, acc.precision.kv, acc.precision.state, 3)


@pytest.mark.slow
def test_gemma2_sliding_window_matches_accountant():
    model = tiny("gemma-2-9b", num_hidden_layers=2, head_dim=16, sliding_window=32, query_pre_attn_scalar=16,
                 layer_types=["sliding_attention", "full_attention"])
    got, want = both(model, 2)
    same_layers(got, want)
    # one sliding layer of window 32 and one full layer, each 1 kv head per rank × (16 K + 16 V) × 2 B = 64 B
    assert [(la.kind, la.window, la.bytes_per_token) for la in got.layers] == [
        (KvKind.SLIDING, 32, 64), (KvKind.FULL, None, 64)]


@pytest.mark.slow
def test_deepseek_mla_latent_matches_accountant():
    model = tiny("deepseek-v3", num_hidden_layers=2, first_k_dense_replace=1, num_key_value_heads=4,
                 q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16,
                 moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1,
                 topk_group=1)
    for tp in (1, 4):
        got, want = both(model, tp)
        same_layers(got, want)
        # (latent 16 + rope 8) × 2 B = 48 B per layer, whole on every rank: 96 B at any tp
        assert got.bytes_per_token == 2 * (16 + 8) * 2 == 96 and got.block_size == 64


@pytest.mark.slow
def test_qwen3_next_gated_delta_state_matches_accountant():
    model = tiny("qwen3-next-80b-a3b", num_hidden_layers=4, head_dim=16, moe_intermediate_size=32,
                 shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2, linear_num_value_heads=4,
                 linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)
    for tp in (1, 2):
        got, want = both(model, tp)
        same_layers(got, want)
    got, _ = both(model, 2)
    # tp 2, per linear layer: recurrent 4/2 heads × 16 × 16 = 512 + conv (2·2·16 + 4·16 = 128)/2 × (4 − 1) = 192,
    # × 2 B = 1,408 B per request; 3 linear layers; the full layer: 1 kv head × 32 × 2 B = 64 B per token
    assert got.state_bytes_per_request == 3 * (2 * 16 * 16 + 64 * 3) * 2 == 4224
    assert got.bytes_per_token == 64


@pytest.mark.slow
def test_nemotron_h_mamba2_state_matches_accountant():
    from tests.importers.test_ssm_scan import TINY_NEMOTRON_H

    model = ResolvedModel("tiny-nemotron-h", copy.deepcopy(TINY_NEMOTRON_H), "path", "test")
    for tp in (1, 2):
        got, want = both(model, tp)
        same_layers(got, want)
    got, _ = both(model, 2)
    # tp 2: conv (32 + 2·2·16 = 96)/2 × 3 × 2 B (bf16) = 288 B + ssm 2 heads × 8 × 16 × 4 B (fp32, NemotronH's
    # mamba_ssm_cache_dtype hook) = 1024 B → 1312 B per request; the attention layer keeps 1 kv head × 16 × 2 B = 32 B
    assert got.state_bytes_per_request == 96 // 2 * 3 * 2 + 2 * 8 * 16 * 4 == 1312
    assert got.bytes_per_token == 32
    # tp 4 with n_groups 2: vLLM's MambaMixer2 pads only a single group (extra_groups_for_head_shards; it asserts
    # n_groups % tp == 0 or n_groups == 1), so both layouts refuse it in one line
    acc = accounting(model.config)
    with pytest.raises(KvLayoutError, match="n_groups = 2 is neither 1 nor divisible by tp = 4"):
        kv_layout(acc.spec, acc.precision, 4)
    graph, _ = import_hf(model, cache=False)
    with pytest.raises(KvLayoutError, match="n_groups = 2 is neither 1 nor divisible by tp = 4"):
        graph_kv_layout(graph, acc.precision.kv, acc.precision.state, 4)


@pytest.mark.slow
def test_lfm2_short_conv_state_matches_accountant():
    cfg = {"architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "hidden_size": 64, "num_hidden_layers": 4,
           "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 97, "intermediate_size": 192,
           "conv_L_cache": 3, "max_position_embeddings": 256, "layer_types": ["conv", "full_attention", "conv", "conv"],
           "torch_dtype": "bfloat16"}
    model = ResolvedModel("tiny-lfm2", cfg, "path", "test")
    for tp in (1, 2):
        got, want = both(model, tp)
        same_layers(got, want)
    got, _ = both(model, 2)
    # tp 2, per conv layer: 64/2 channels × (3 − 1) × 2 B = 128 B per request (vLLM short_conv_state_shape);
    # 3 conv layers; the attention layer keeps 1 kv head × (16 K + 16 V) × 2 B = 64 B per token
    assert got.state_bytes_per_request == 3 * 32 * 2 * 2 == 384
    assert got.bytes_per_token == 64


# OPT stands for a causal LM transformers ships and the work accountant lacks: the accountant registers OPT
# (graphsim/work/builders/legacy.py), so the fixture takes it out of the registry for these tests. 2 layers of 4 heads
# of 64 / 4 = 16.
TINY_OPT = {"architectures": ["OPTForCausalLM"], "model_type": "opt", "hidden_size": 64, "ffn_dim": 128,
            "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 96, "max_position_embeddings": 128,
            "word_embed_proj_dim": 64, "torch_dtype": "bfloat16"}


@pytest.fixture
def opt_dir(tmp_path, monkeypatch):
    from graphsim.work import registry

    monkeypatch.delitem(registry.BUILDERS, "OPTForCausalLM")
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "200")
    d = tmp_path / "tiny-opt"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_OPT))
    return d


def test_unregistered_architecture_kv_end_to_end(opt_dir, capsys):
    assert accountant_lacks(TINY_OPT) is not None and accountant_lacks(resolve_model("llama-3.1-8b").config) is None
    assert main(["kv", str(opt_dir), "--tp", "2", "--kv-memory", "1GiB", "--json"]) == 0
    cap = capsys.readouterr()
    assert "no builder for OPTForCausalLM" in cap.err and "traced graph" in cap.err
    d = json.loads(cap.out)
    assert d["layout"]["source"] == "traced graph" and "OPTForCausalLM" in d["layout"]["why"]
    # tp 2: 4 kv heads / 2 = 2 per rank × (16 K + 16 V) × 2 B = 128 B per layer, 2 layers = 256 B per token
    assert d["layout"]["bytes_per_token_per_rank"] == 2 * 2 * 32 * 2 == 256
    # one group of 2 layers, 16-token blocks: 2 × 16 × 128 = 4,096 B per block; 1 GiB / 4,096 B = 262,144 blocks
    assert d["layout"]["bytes_per_block"] == 4096 and d["capacity"]["num_blocks"] == 2**30 // 4096 == 262_144
    assert d["memory"] is None
    # text, without --kv-memory: the budget comes from the traced graph as simulate's does (graph_deployment.py),
    # each of its terms labelled, and the capacity follows from it
    assert main(["kv", str(opt_dir), "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "traced graph" in out and "available for KV" in out and "GPU KV cache size" in out


def test_unregistered_architecture_refusals_are_one_line(opt_dir, capsys):
    # 4 heads over 3 ranks: vLLM's own refusal (ModelConfig.verify_with_parallel_config), before the traced graph
    assert main(["kv", str(opt_dir), "--tp", "3"]) == 2
    assert "'Total number of attention heads (4) must be divisible by tensor parallel size (3)'" in capsys.readouterr().err
    assert main(["kv", str(opt_dir), "-pp", "2"]) == 2
    err = capsys.readouterr().err
    assert "--pipeline-parallel-size" in err and "Traceback" not in err


def test_blind_spots_are_stated_not_guessed():
    # chunked local attention and cross-layer KV sharing are config facts the attention nodes do not carry
    assert graph_blind_spots(TINY_OPT) == []
    notes = graph_blind_spots({"text_config": {"attention_chunk_size": 8192}, "num_kv_shared_layers": 10})
    assert len(notes) == 2 and "attention_chunk_size = 8192" in notes[0] and "num_kv_shared_layers = 10" in notes[1]


def test_static_trace_is_refused_not_laid_out(opt_dir, monkeypatch, capsys):
    # a graph traced at a fixed token count hides a sequence mechanism's state (DeepSeek-V4's compressed KV read as
    # a plain sliding window): refused in one line rather than laid out short
    import graphsim.importers.hf as hf

    real = hf.import_hf

    def static(model, **kw):
        graph, report = real(model, **kw)
        graph.meta.dynamic_tokens = False
        return graph, report

    monkeypatch.setattr(hf, "import_hf", static)
    assert main(["kv", str(opt_dir), "--kv-memory", "1GiB"]) == 2
    err = capsys.readouterr().err
    assert "fixed token count" in err and "Traceback" not in err
