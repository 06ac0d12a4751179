"""What benchmarks/architectures_sweep.py found (issue 16: every registered architecture as a user tries it), each
fixed in general and checked here on a tiny case; and (slow) the sweep's `predict` at tp 1 over every registered
architecture: no traceback, only `ok` or one `error:` line."""

from __future__ import annotations

import json

import pytest
import sympy

from graphsim.errors import UnsupportedArchitectureError
from graphsim.ir import DType, T, TensorSpec
from graphsim.ir.kernel import Rows
from graphsim.passes.fuse.patterns import per_token
from graphsim.serving.capacity import CapacityError, kv_capacity
from graphsim.serving.kv_layout import KvLayout


def test_per_token_of_a_token_proportional_value():
    # (T, 64) bf16: 64 elements a token
    assert per_token(TensorSpec((T, 64), DType.BFLOAT16)) == (64, Rows.TOKENS)
    assert per_token(TensorSpec((4, 64), DType.BFLOAT16)) == (256, Rows.ONCE)


def test_per_token_of_a_data_dependent_size_is_one_error_line():
    # JetMoe's loop over experts: torch.export gives each expert's token count an unbacked size (u0, u1, ...);
    # it has no per-token width: an UnsupportedArchitectureError (the CLI's one `error:` line), not a TypeError.
    u0, u1 = sympy.Symbol("u0", positive=True, integer=True), sympy.Symbol("u1", positive=True, integer=True)
    with pytest.raises(UnsupportedArchitectureError, match=r"depends on the data \(u0, u1:"):
        per_token(TensorSpec((u0 + u1, 256), DType.BFLOAT16))


def test_a_model_without_a_cache_of_its_own_is_one_error_line():
    # A Gemma-4 assistant reads every layer's K/V from its target: no layers, no groups, no bytes. The capacity
    # was an infinite concurrency whose token count (int(inf × max_model_len)) raised OverflowError.
    empty = KvLayout("Gemma4AssistantForCausalLM", 1, DType.BFLOAT16, DType.FLOAT32, (), (), 16)
    with pytest.raises(CapacityError, match="no KV cache or recurrent state of its own"):
        kv_capacity(empty, 10 << 30, 512, 8192)


def test_the_layer_stack_is_the_text_models_even_when_a_tower_has_more_blocks():
    torch = pytest.importorskip("torch")
    from graphsim.importers.hf.layers import find_layer_stack

    class Cfg:
        def __init__(self, text=None):
            self.text = text

        def get_text_config(self):
            return self.text or self

    text_cfg, vision_cfg = Cfg(), Cfg()

    class Tower(torch.nn.Module):
        def __init__(self, cfg, n):
            super().__init__()
            self.config = cfg
            self.layers = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(n))

    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = Cfg(text_cfg)
            self.visual = Tower(vision_cfg, 27)  # Qwen3-VL-MoE's class defaults: 27 vision blocks, 24 text layers
            self.language_model = Tower(text_cfg, 24)

    path, stack = find_layer_stack(Wrapper())
    assert (path, len(stack)) == ("language_model.layers", 24)
    # a model whose config names no text model: the longest list, as before
    lone = Tower(None, 3)
    lone.config = None
    assert find_layer_stack(lone)[0] == "layers"


def _predict(cfg: dict, tmp_path, *extra: str) -> tuple[int, str]:
    from typer.testing import CliRunner

    from graphsim.cli.app import _register, app

    _register()
    d = tmp_path / f"m{len(extra)}"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    res = CliRunner().invoke(app, ["--no-cache", "predict", str(d / "config.json"), "--gpu", "h100", "-b",
                                   "decode:4x128", "--json", *extra])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output


@pytest.mark.slow  # ~9 s under the shared load (a trace and a predict)
def test_mamba1_channels_first_gate_is_no_act_and_mul(tmp_path):
    # MambaMixer's slow path gates `x * act(z)` in (batch, channels, tokens): the product's last dimension is the
    # token count, no act-and-mul width (was int() of a symbol: TypeError). It now prices; the gate has since moved
    # inside the semantic scan (graphsim::selective_scan, mamba1_ops.py), so this guards the importer's path end to end.
    pytest.importorskip("transformers")
    cfg = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 32, "state_size": 4,
           "num_hidden_layers": 2, "vocab_size": 128, "expand": 2, "conv_kernel": 4, "time_step_rank": 4}
    code, out = _predict(cfg, tmp_path)
    assert code == 0, out
    kernels = json.loads(out)["batches"][0]["kernels"]
    assert "act_and_mul" not in {k["kind"] for k in kernels}
    assert any(k["kernel"] == "in_proj" and k["kind"] == "gemm" for k in kernels)


@pytest.mark.slow
def test_sweep_predict_tp1_has_no_traceback(benchmark_script, tmp_path):
    """Every registered architecture's tiny class-default config through `graphsim predict` at tp 1 (~3.5 min on
    2 cores with an empty graph cache)."""
    pytest.importorskip("transformers")
    sweep = benchmark_script("architectures_sweep")
    from graphsim.work.registry import supported_architectures

    tracebacks = {}
    for arch in supported_architectures():
        row = sweep.sweep_one(arch, ["predict1"], tmp_path)
        if row.get("predict1", {}).get("status") == "TRACEBACK":
            tracebacks[arch] = row["predict1"]["line"]
    assert not tracebacks, tracebacks


def test_an_attention_table_without_graphsims_entry_is_named(monkeypatch):
    # GPT-Neo picks its attention class from GPT_NEO_ATTENTION_CLASSES[config._attn_implementation] (eager and
    # flash_attention_2 only): the build raised KeyError('graphsim'), reported as "check config.json". The importer
    # now gives that table a graphsim entry (importers/hf/table_attention.py); a table without one is still named.
    pytest.importorskip("transformers")
    import transformers.models.gpt_neo.modeling_gpt_neo as gpt_neo

    from graphsim.importers.hf.build import build_on_meta

    monkeypatch.delitem(gpt_neo.GPT_NEO_ATTENTION_CLASSES, "graphsim", raising=False)

    cfg = {"architectures": ["GPTNeoForCausalLM"], "model_type": "gpt_neo", "hidden_size": 32, "num_layers": 2,
           "num_heads": 4, "attention_types": [[["global", "local"], 1]], "vocab_size": 128,
           "max_position_embeddings": 64}
    with pytest.raises(UnsupportedArchitectureError, match="no 'graphsim' entry"):
        build_on_meta(cfg)


def test_a_depth_the_config_class_derives_is_not_missing():
    # LongCat-Flash's config.json has num_layers only; LongcatFlashConfig.num_hidden_layers is 2 × num_layers.
    pytest.importorskip("transformers")
    from graphsim.errors import ConfigError
    from graphsim.importers.hf.build import check_config

    cfg = {"architectures": ["LongcatFlashForCausalLM"], "model_type": "longcat_flash", "hidden_size": 64,
           "num_layers": 2, "vocab_size": 128}
    assert check_config(cfg) == "LongcatFlashForCausalLM"
    with pytest.raises(ConfigError, match="missing required field"):  # a class that derives nothing: still missing
        check_config({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                      "vocab_size": 128})


def test_restore_depth_gives_cut_configs_their_depth_back():
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from graphsim.importers.hf.layers import restore_depth

    cfg = SimpleNamespace(num_hidden_layers=2, layer_types=["sliding", "full"])  # cut from 6 layers to 2 kept
    model = torch.nn.Module()
    assert restore_depth(model, cfg, 6, 2) is True
    assert cfg.num_hidden_layers == 6 and cfg.layer_types == ["sliding", "full"]  # the lists stay cut
    assert restore_depth(model, cfg, 6, 2) is False  # nothing cut any more


def test_per_layer_inputs_trace_on_the_kept_layers(tmp_path):
    # Gemma-4's per-layer input embedding is num_hidden_layers x hidden_size_per_layer_input wide and its forward
    # reshapes it by the config's depth: on the cut config (4 layers kept of 6) the trace failed (shape invalid).
    pytest.importorskip("transformers")
    from graphsim.importers.hf import import_hf

    cfg = {"architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "hidden_size": 64,
           "intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 32, "vocab_size": 256, "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 16,
           "sliding_window": 64, "max_position_embeddings": 512,
           "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}
    d = tmp_path / "g4"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    graph, report = import_hf(str(d / "config.json"), cache=False)
    assert report.num_layers == 6 and len(report.traced_layers) < 6
    # the per-layer embedding: a table of 256 rows x (6 layers x 16) = 96 columns, read whole at full depth
    widths = [n.outputs[0].shape[-1] for n in graph.nodes if n.scope.endswith("embed_tokens_per_layer")]
    assert 96 in widths, widths


def test_a_comparisons_placeholder_is_priced_at_its_input_dtype(tmp_path):
    # Apertus's xIELU activation compares x > 0: a bool output no kernel table prices, so the step's time was
    # missing (simulate: "iteration time missing"); it is now read at its bf16 input's dtype, still approximate.
    pytest.importorskip("transformers")
    cfg = {"architectures": ["ApertusForCausalLM"], "model_type": "apertus", "hidden_size": 64,
           "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 256, "max_position_embeddings": 512, "torch_dtype": "bfloat16"}
    code, out = _predict(cfg, tmp_path)
    assert code == 0, out
    batch = json.loads(out)["batches"][0]
    assert batch["missing"] == [] and batch["total_us"] > 0
    compares = [k for k in batch["kernels"] if k["kernel"] == "compare"]
    # (the comparison is now vLLM's own xIELU kernel, fuse rule xielu_python, priced the same way: not approximate)
    assert compares and all(k["source"] != "missing" for k in compares)


def test_norm_classes_are_named_by_their_ending():
    from graphsim.passes.fuse.patterns import NORM_CLASS

    norms = ["LlamaRMSNorm", "LayerNorm", "Llama4TextL2Norm", "MambaRMSNormGated", "NemotronLayerNorm1P",
             "Qwen3NextRMSNormGated"]
    # RoBERTa-PreLayerNorm's modules carry the model's name: its embeddings module was fused as a norm (a cycle)
    others = ["RobertaPreLayerNormEmbeddings", "RobertaPreLayerNormSelfAttention", "RobertaPreLayerNormLayer"]
    assert all(NORM_CLASS.search(c) for c in norms)
    assert not any(NORM_CLASS.search(c) for c in others)


@pytest.mark.parametrize("arch", ["NanoChatForCausalLM", "RobertaPreLayerNormForCausalLM"])
def test_norm_units_are_one_call_each(arch, tmp_path):
    # NanoChat calls its weightless model.norm before and after the layers: one unit over both calls was a cycle
    # (fused_add_rms_norm(model.norm) -> ... -> model.layers.0 -> model.norm); RoBERTa-PreLN: the class names above.
    pytest.importorskip("transformers")
    common = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
              "vocab_size": 256, "max_position_embeddings": 512}
    model_type = {"NanoChatForCausalLM": "nanochat", "RobertaPreLayerNormForCausalLM": "roberta-prelayernorm"}[arch]
    cfg = {"architectures": [arch], "model_type": model_type, **common}
    if arch == "NanoChatForCausalLM":
        cfg["num_key_value_heads"] = 4
    else:
        cfg["is_decoder"] = True
    code, out = _predict(cfg, tmp_path)
    assert code == 0, out
    kernels = json.loads(out)["batches"][0]["kernels"]
    norms = [k for k in kernels if k["kind"] == "norm" or "norm" in k["kernel"]]
    assert norms and not any(k["approximate"] for k in kernels if "norm" in k["kernel"])


def test_a_qk_norm_after_rope_is_no_residual_norm(tmp_path):
    # NanoChat normalises q and k after RoPE: RoPE's add (q·cos + rot(q)·sin, heads x head_dim a token) was taken
    # for the residual add of a fused_add_rms_norm of width head_dim, and tp 2 refused it ("splits the residual
    # stream"). The residual stream holds one row of the norm's width a token; now tp 2 conserves.
    pytest.importorskip("transformers")
    cfg = {"architectures": ["NanoChatForCausalLM"], "model_type": "nanochat", "hidden_size": 64,
           "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 4,
           "vocab_size": 256, "max_position_embeddings": 512}
    code, out = _predict(cfg, tmp_path, "-tp", "2")
    assert code == 0, out
    kernels = json.loads(out)["batches"][0]["kernels"]
    # one fused_add_rms_norm per residual add: after attention (the layer's second norm) and the final norm
    layer = [k for k in kernels if k["kernel"] == "fused_add_rms_norm" and "×" in k["region"]]
    assert sum(k["count"] for k in layer) == 1, [(k["node"], k["count"]) for k in layer]
