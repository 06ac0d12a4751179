"""The accountant follows transformers wherever a config omits a field.

Three independent checks against the pinned transformers (the accountant never imports it; these
tests do):
1. `config_defaults.json` equals the keyword defaults of each registered architecture's config class.
2. The accountant's resolved dimensions equal transformers' resolved config attributes, for each
   registered architecture at its class-default config, at that config stripped to the four frame
   fields (every other field then comes from the defaults), with each boolean weight trait flipped
   and with grouped KV heads, and for every config in the repository.
3. The accountant's total parameter count equals the parameter count (parameters and persistent
   buffers) of the transformers model built on the meta device from the same config (no weights),
   for the same configs.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from graphsim.work import accounting
from graphsim.work.builders.modern_b import TEXT_CONFIG_NESTED, TOWERS, WRAPPERS
from graphsim.work.config_defaults import FRAME_KEYS, class_defaults
from graphsim.work.registry import (
    NO_TRANSFORMERS_CLASS, TRANSFORMERS_CLASS, build_model, language_model, supported_architectures,
)
from graphsim.work.specs import (
    CompressedAttention, GqaAttention, Mamba1Mixer, Mamba2Mixer, MlaAttention, MoeFfn, ParallelMixers, ShortConv,
)

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
def _aiconfigurator_configs() -> list[Path]:
    """Real public config.json files that aiconfigurator-core ships (the `aiconfigurator` extra)."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        return []
    return [Path(next(iter(spec.submodule_search_locations))) / "model_configs"]


CONFIG_DIRS = [
    REPO / "graphsim" / "catalog" / "configs", REPO.parent / "shared" / "hf-configs", *_aiconfigurator_configs(),
]
# Fields transformers' config classes do not take (or that only the checkpoint loader reads).
_NOT_CONFIG_ARGS = ("architectures", "model_type", "transformers_version", "quantization_config", "auto_map")


# Boolean config fields that change which weights exist; each is flipped in a case of its own.
TRAITS = {
    "attention_bias", "attention_out_bias", "mlp_bias", "use_bias", "qkv_bias", "use_qk_norm", "use_post_norm",
    "tie_word_embeddings", "use_qkv_bias", "qk_layernorm", "use_parallel_residual",
    # state-space and short-conv families (graphsim/work/builders/ssm.py)
    "use_conv_bias", "mamba_conv_bias", "mamba_proj_bias", "conv_bias", "use_attention_gate", "use_sandwich_norm",
    "use_expert_bias", "mamba_rms_norm", "projectors_bias", "add_bias_linear", "use_shared_attention_adapter",
    # GPT-era classes (graphsim/work/builders/legacy.py): Falcon's and GPT-BigCode's attention layout, OPT's norms
    "multi_query", "parallel_attn", "new_decoder_architecture", "bias", "enable_bias", "do_layer_norm_before",
    "layer_norm_elementwise_affine", "_remove_final_layer_norm",
}


def _repo_configs() -> list[tuple[str, dict[str, Any]]]:
    out = []
    seen: set[str] = set()
    for folder in CONFIG_DIRS:
        for path in sorted(folder.glob("*config.json") if "model_configs" in folder.name else folder.glob("*.json")):
            text = path.read_text()
            if text in seen:
                continue
            seen.add(text)
            # Element counts do not depend on how a checkpoint quantizes them (unsupported methods are
            # refused elsewhere: tests/work/test_work_params.py).
            cfg = {k: v for k, v in json.loads(text).items() if k != "quantization_config"}
            arch = (cfg.get("architectures") or [None])[0]
            if arch in NO_TRANSFORMERS_CLASS:  # no transformers class to hold it against (tests/work/test_work_nas_step.py)
                continue
            if arch in supported_architectures():
                out.append((f"{folder.name}/{path.stem}", cfg))
            elif isinstance(arch, str) and (inner := language_model(cfg, arch)) is not None:
                if inner[0] in NO_TRANSFORMERS_CLASS:  # a remote-code text model (Step-3.7's step3p5)
                    continue
                # A multimodal wrapper: its language model, as the accountant resolves it.
                out.append((f"{folder.name}/{path.stem}", dict(inner[1], architectures=[inner[0]])))
    assert out, "no repository configs found"
    return out


def _config_class(arch: str) -> Any:
    return _hf_class(arch).config_class


def _hf_class(arch: str) -> Any:
    """The transformers class of an architecture (a checkpoint may spell it otherwise: registry.TRANSFORMERS_CLASS)."""
    return getattr(transformers, TRANSFORMERS_CLASS.get(arch, arch))


def _hf_config(arch: str, cfg: dict[str, Any]) -> Any:
    return _config_class(arch)(**{k: v for k, v in cfg.items() if k not in _NOT_CONFIG_ARGS})


# Class-default configs transformers itself cannot build a model from, and the field that fixes each:
# DeepseekV2Config() has n_routed_experts=64 but num_experts_per_tok=None (the router reads top-k;
# DeepSeek-V2's config.json says 6); HunYuanDenseV1Config() and MinistralConfig() have head_dim=None,
# which their attention reads as-is (`head_dim ** -0.5`); hidden/heads = 4096/32 = 128. Glm4MoeConfig()
# has hidden 4096 over 96 heads and head_dim=None (not divisible); GLM-4.5's config.json states 128.
_UNBUILDABLE_DEFAULTS = {
    "Glm4MoeForCausalLM": {"head_dim": 128},
    "DeepseekV2ForCausalLM": {"num_experts_per_tok": 6},
    "HunYuanDenseV1ForCausalLM": {"head_dim": 128},
    "HunYuanMoEV1ForCausalLM": {"head_dim": 128},  # the same head_dim=None as HunYuan dense
    # Dots1Config() leaves the MoE sizes None, which Dots1MoE reads as-is; dots.llm1's config.json
    # states 128 routed experts, top-6, 2 shared.
    "Dots1ForCausalLM": {"n_routed_experts": 128, "num_experts_per_tok": 6, "n_shared_experts": 2},
    "MinistralForCausalLM": {"head_dim": 128},
    # NemotronConfig() leaves num_key_value_heads None, which NemotronAttention divides by; MHA (48) as the
    # accountant reads an absent field.
    "NemotronForCausalLM": {"num_key_value_heads": 48},
    # Lfm2MoeConfig() leaves layer_types None, which Lfm2MoeDecoderLayer indexes; one entry per default layer (32),
    # attention every 4th from layer 2, the spacing of LFM2-8B-A1B's config.json (attention at 2, 6, 10, 14, 18, 21).
    "Lfm2MoeForCausalLM": {"layer_types": ["full_attention" if i % 4 == 2 else "conv" for i in range(32)]},
    # DbrxAttentionConfig() has no rope_theta, which DbrxAttention reads; dbrx-instruct's config.json states 500000.
    "DbrxForCausalLM": {"attn_config": {"kv_n_heads": 1, "rope_theta": 500000.0}},
    # CohereCompassTextConfig() keeps rope_parameters None, but its rotary embedding reads one entry per layer type.
    "CohereCompassForCausalLM": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
}


# Flips the config class itself refuses (DbrxConfig.validate_architecture: no tied embeddings); the
# accountant refuses them too (tests/work/test_work_modern_a.py).
# Zamba2 untied: transformers then unties its shared transformer blocks too (graphsim/work/builders/ssm.py refuses it)
_REFUSED_FLIPS = {("DbrxForCausalLM", "tie_word_embeddings"), ("Zamba2ForCausalLM", "tie_word_embeddings")}


def _default_config(arch: str) -> dict[str, Any]:
    return dict(_config_class(arch)().to_dict(), **_UNBUILDABLE_DEFAULTS.get(arch, {}))


# Gemma4AssistantConfig() fails its own validation (its default text config, Gemma4TextConfig(), has per-layer
# inputs and no KV-shared layers; an assistant has neither per-layer inputs nor a layer of its own K/V: every one
# of the 30 default layers reuses the target's).
_NESTED_DEFAULTS: dict[str, dict[str, Any]] = {
    "Gemma4AssistantForCausalLM": {"model_type": "gemma4_text", "hidden_size_per_layer_input": 0,
                                   "vocab_size_per_layer_input": 0, "num_kv_shared_layers": 30},
}


def _wrapper_cases(arch: str) -> list[Any]:
    """A multimodal wrapper's cases: its class defaults, its text_config stripped to the frame fields (and
    model_type, which picks an AutoConfig text class, and the KV heads: GOT-OCR2's 16 heads are no model
    with Qwen2Config's default 32 KV heads), its own tie_word_embeddings flipped (the wrapper's decides:
    PreTrainedModel.tie_weights reads the top-level config) and each boolean trait of its text config
    flipped."""
    full = _config_class(arch)(text_config=_NESTED_DEFAULTS.get(arch)).to_dict()
    text = full["text_config"]
    # (an assistant's text config must keep num_kv_shared_layers == num_hidden_layers)
    kept = (*FRAME_KEYS, "model_type", "num_key_value_heads", "num_kv_shared_layers")
    stripped = {"text_config": {k: text[k] for k in kept if k in text} | _NESTED_DEFAULTS.get(arch, {})}
    cases = [pytest.param(arch, full, id=f"{arch}-class-defaults"),
             pytest.param(arch, stripped, id=f"{arch}-frame-only")]
    if isinstance(full.get("tie_word_embeddings"), bool):
        flipped = dict(full, tie_word_embeddings=not full["tie_word_embeddings"])
        cases.append(pytest.param(arch, flipped, id=f"{arch}-tie_word_embeddings-flipped"))
    for key in sorted(TRAITS & set(text) - {"tie_word_embeddings"}):
        if isinstance(text[key], bool):
            flipped = dict(full, text_config=dict(text, **{key: not text[key]}))
            cases.append(pytest.param(arch, flipped, id=f"{arch}-text-{key}-flipped"))
    return cases


def _language_model_count(model: Any, persistent: set[str]) -> int:
    """A wrapper's language model as the accountant counts it: the parameters and persistent buffers of its
    `language_model` submodule plus its LM head (a tied head is the embedding's tensor: counted once). The
    vision/audio towers and projectors are not counted (the accountant says so in a note)."""
    [(name, lm)] = [(n, m) for n, m in model.named_modules() if n.split(".")[-1] == "language_model"]
    params = {id(p): p.numel() for p in [*lm.parameters(), *model.lm_head.parameters()]}
    return sum(params.values()) + sum(b.numel() for n, b in lm.named_buffers() if f"{name}.{n}" in persistent)


def _cases() -> list[Any]:
    cases = []
    for arch in supported_architectures():
        if arch in NO_TRANSFORMERS_CLASS:  # remote code only: held to its model card in test_work_nas_step.py
            continue
        if arch in TEXT_CONFIG_NESTED:  # a multimodal wrapper or a drafter: the text model is in text_config
            cases += _wrapper_cases(arch)
            continue
        full = _default_config(arch)
        # (NemotronHConfig derives num_hidden_layers from its layer list and does not serialise it)
        # (GPT-2 and its kin serialise the frame under their attribute_map names: n_embd, n_layer, n_head)
        aliases = _config_class(arch).attribute_map
        frame = FRAME_KEYS | {aliases[k] for k in FRAME_KEYS if k in aliases}
        stripped = {k: full[k] for k in frame if k in full} | _UNBUILDABLE_DEFAULTS.get(arch, {})
        cases.append(pytest.param(arch, full, id=f"{arch}-class-defaults"))
        cases.append(pytest.param(arch, stripped, id=f"{arch}-frame-only"))
        for key in sorted(TRAITS & set(full)):
            if isinstance(full[key], bool) and (arch, key) not in _REFUSED_FLIPS:
                cases.append(pytest.param(arch, dict(full, **{key: not full[key]}), id=f"{arch}-{key}-flipped"))
        # (Mamba and Mamba2 configs have no attention heads)
        heads, kv = full.get(aliases.get("num_attention_heads", "num_attention_heads")), full.get("num_key_value_heads")
        if kv is not None and heads and heads % 4 == 0 and kv != heads // 4:
            cases.append(pytest.param(arch, dict(full, num_key_value_heads=heads // 4), id=f"{arch}-gqa"))
        if "word_embed_proj_dim" in full and full["word_embed_proj_dim"] == full["hidden_size"]:  # OPT-350m: project_in/out
            narrow = dict(full, word_embed_proj_dim=full["hidden_size"] // 2)
            cases.append(pytest.param(arch, narrow, id=f"{arch}-word_embed_proj_dim"))
    for name, cfg in _repo_configs():
        cases.append(pytest.param(cfg["architectures"][0], cfg, id=name))
    return cases


def test_table_equals_the_installed_config_classes():
    from graphsim.importers.hf.config_defaults import defaults_from_transformers

    stale = []
    for arch in set(supported_architectures()) - set(TRANSFORMERS_CLASS) - NO_TRANSFORMERS_CLASS:  # (an alias reads its class's)
        _, live = defaults_from_transformers(arch)
        if class_defaults(arch) != live:
            stale.append(arch)
    assert not stale, f"config_defaults.json is stale for {stale}: run python -m graphsim.importers.hf.config_defaults"


def test_qwen3_without_head_dim_uses_the_class_default():
    # Qwen3-32B: hidden 5120, 64 heads. Without head_dim, hidden/heads would give 80; Qwen3Config's
    # default is 128 (transformers qwen3/configuration_qwen3.py), which the real checkpoint also states.
    cfg = json.loads((REPO / "graphsim" / "catalog" / "configs" / "Qwen3-32B.json").read_text())
    del cfg["head_dim"]
    attn = build_model(cfg).stack.layers[0].attn
    assert isinstance(attn, GqaAttention)
    assert attn.head_dim == 128
    # 32.76 B as the published checkpoint (Qwen/Qwen3-32B model page: 32.8B), not 30.50 B.
    assert accounting(cfg).params().total == 32_762_123_264


def _layer_attr(hf: Any, i: int, name: str) -> Any:
    """The config's attribute, or layer i's where a heterogeneous config (Gemma-4's per_layer_config)
    refuses a global read of a per-layer attribute."""
    try:
        return getattr(hf, name, None)
    except Exception as e:  # transformers' AmbiguousGlobalPerLayerAttributeError
        if type(e).__name__ != "AmbiguousGlobalPerLayerAttributeError":
            raise
        return getattr(hf.per_layer_config[i], name)


# The layer types transformers gives a layer with a Mamba mixer or a short conv (legacy names included)
_MIXER_TYPES = ("linear_attention", "mamba", "conv")


def _first(hf: Any, *names: str) -> Any:
    """The first of several attribute names the config class has (families name one dimension differently)."""
    return next(getattr(hf, n) for n in names if hasattr(hf, n))


@pytest.mark.parametrize(("arch", "cfg"), _cases())
def test_resolved_dimensions_match_transformers(arch: str, cfg: dict[str, Any]):
    spec = build_model(dict(cfg, architectures=[arch]))
    top = _hf_config(arch, cfg)
    hf = top.get_text_config() if arch in TEXT_CONFIG_NESTED else top  # a wrapper: its language model's config
    # The decoder half of an encoder–decoder model (BartForCausalLM) has its own depth and heads; there the
    # config's num_hidden_layers / num_attention_heads name the encoder's (BartConfig.attribute_map)
    dec_layers, dec_heads = getattr(hf, "decoder_layers", None), getattr(hf, "decoder_attention_heads", None)
    layers = dec_layers or hf.num_hidden_layers
    assert (spec.hidden, spec.vocab, len(spec.stack.layers)) == (hf.hidden_size, hf.vocab_size, layers)
    # A class that declares no tied weights (NemotronHForCausalLM._tied_weights_keys = {},
    # BigBirdPegasusForCausalLM's None) never ties.
    ties = bool(getattr(_hf_class(arch), "_tied_weights_keys", None))
    assert spec.tie_embeddings == (top.tie_word_embeddings and ties)
    layer_types = getattr(hf, "layer_types", None)
    for i, layer in enumerate(spec.stack.layers):
        attn = layer.attn
        if isinstance(attn, GqaAttention):
            kv = _layer_attr(hf, i, "num_key_value_heads") or hf.num_attention_heads  # GPT-NeoX has no such field
            if arch == "GPTBigCodeForCausalLM":  # GPTBigCodeAttention.kv_heads
                kv = 1 if hf.multi_query else hf.num_attention_heads
            elif arch == "FalconForCausalLM":  # FalconAttention: qkv_out_dim and num_kv_heads
                kv = hf.num_kv_heads if hf.new_decoder_architecture else 1 if hf.multi_query else hf.num_attention_heads
            elif arch == "DbrxForCausalLM":  # DbrxAttention reads attn_config.kv_n_heads, whatever the top level says
                kv = hf.attn_config.kv_n_heads
            elif dec_heads:  # multi-head decoders (WhisperConfig aliases num_key_value_heads to the encoder's heads)
                kv = dec_heads
            if arch == "MiMoV2FlashForCausalLM" and layer_types and layer_types[i] == "sliding_attention":
                kv *= 2  # MiMoV2FlashAttention: sliding layers double num_key_value_heads
            head_dim = _layer_attr(hf, i, "head_dim") or hf.hidden_size // (dec_heads or hf.num_attention_heads)
            heads = (getattr(hf, "num_attention_heads_per_layer", None)
                     or [dec_heads or hf.num_attention_heads] * (i + 1))[i]  # Laguna
            if arch == "JetMoeForCausalLM":  # JetMoeAttention: top_k experts of kv_heads query heads each (a
                heads = hf.num_key_value_heads * hf.num_experts_per_tok  # stated num_attention_heads is not read)
            assert (attn.heads, attn.kv_heads, attn.head_dim) == (heads, kv, head_dim), f"layer {i}"
            if arch == "GPTNeoForCausalLM":  # GPTNeoConfig.attention_layers: "local" layers mask beyond window_size
                assert attn.window == (hf.window_size if hf.attention_layers[i] == "local" else None), f"layer {i}"
            if layer_types is not None:
                assert (attn.window is not None) == (layer_types[i] == "sliding_attention"), f"layer {i}"
                if attn.window is not None:
                    assert attn.window == hf.sliding_window
        elif isinstance(attn, MlaAttention):
            got = (attn.q_lora_rank, attn.kv_lora_rank, attn.qk_nope_head_dim, attn.qk_rope_head_dim, attn.v_head_dim)
            want = (hf.q_lora_rank, hf.kv_lora_rank, hf.qk_nope_head_dim, hf.qk_rope_head_dim, hf.v_head_dim)
            assert got == want, f"layer {i}"
            if attn.indexer is not None:  # DSA: the indexer's heads, width and top-k
                ix = attn.indexer
                assert (ix.heads, ix.head_dim, ix.topk) == (hf.index_n_heads, hf.index_head_dim, hf.index_topk)
        elif isinstance(attn, Mamba2Mixer):
            got = (attn.heads, attn.head_dim, attn.state_size, attn.n_groups, attn.conv_kernel)
            # Nemotron-H, Bamba / Granite-4.0-H, Mamba2 name the same dimensions three ways
            want = tuple(_first(hf, *names) for names in (
                ("mamba_num_heads", "mamba_n_heads", "n_mamba_heads", "num_heads"),
                ("mamba_head_dim", "mamba_d_head", "mamba_headdim", "head_dim"),
                ("ssm_state_size", "mamba_d_state", "state_size"), ("mamba_n_groups", "mamba_ngroups", "n_groups"),
                ("mamba_d_conv", "conv_kernel")))
            assert got == want, f"layer {i}"
            assert layer_types is None or layer_types[i] in _MIXER_TYPES, f"layer {i}"
        elif isinstance(attn, Mamba1Mixer):
            # Jamba's intermediate_size is its MLP's; its mixer is mamba_expand × hidden (JambaMambaMixer)
            inner = (int(hf.mamba_expand * hf.hidden_size) if hasattr(hf, "mamba_expand") else hf.intermediate_size)
            got = (attn.intermediate, attn.state_size, attn.conv_kernel, attn.dt_rank)
            want = (inner, _first(hf, "mamba_d_state", "state_size"), _first(hf, "mamba_d_conv", "conv_kernel"),
                    _first(hf, "mamba_dt_rank", "time_step_rank"))
            assert got == want, f"layer {i}"
            assert layer_types is None or layer_types[i] in _MIXER_TYPES, f"layer {i}"
        elif isinstance(attn, ParallelMixers):  # Falcon-H1, Zamba2's hybrid layers: attention beside a Mamba2 mixer
            head_dim = (getattr(hf, "attention_head_dim", None) or getattr(hf, "head_dim", None)
                        or hf.hidden_size // hf.num_attention_heads)
            got = (attn.attn.heads, attn.attn.kv_heads, attn.attn.head_dim, attn.mamba.heads, attn.mamba.head_dim,
                   attn.mamba.state_size, attn.mamba.n_groups, attn.mamba.conv_kernel, attn.mamba.intermediate)
            want = (hf.num_attention_heads, hf.num_key_value_heads, head_dim, _first(hf, "mamba_n_heads", "n_mamba_heads"),
                    _first(hf, "mamba_d_head", "mamba_headdim"), hf.mamba_d_state,
                    _first(hf, "mamba_n_groups", "mamba_ngroups"), hf.mamba_d_conv,
                    getattr(hf, "mamba_d_ssm", None) or int(hf.mamba_expand * hf.hidden_size))
            assert got == want, f"layer {i}"
            assert layer_types is None or layer_types[i] in ("hybrid", "parallel_hybrid"), f"layer {i}"
        elif isinstance(attn, ShortConv):
            assert (attn.hidden, attn.conv_kernel) == (hf.hidden_size, hf.conv_L_cache), f"layer {i}"
            assert layer_types is not None and layer_types[i] == "conv", f"layer {i}"
        elif isinstance(attn, CompressedAttention):  # DeepSeek-V4: the window, the compressor's rate, the indexer
            got = (attn.heads, attn.head_dim, attn.rope_dim, attn.q_lora_rank, attn.o_groups, attn.o_lora_rank,
                   attn.window, attn.ratio)
            want = (hf.num_attention_heads, hf.head_dim, hf.qk_rope_head_dim, hf.q_lora_rank, hf.o_groups,
                    hf.o_lora_rank, hf.sliding_window, hf.compress_rates.get(hf.layer_types[i], 0))
            assert got == want, f"layer {i}"
            indexed = attn.index_compressor is not None
            assert indexed == (hf.layer_types[i] == "compressed_sparse_attention"), f"layer {i}"
            if attn.index_compressor is not None:
                got = (attn.index_heads, attn.index_compressor.head_dim, attn.index_topk)
                assert got == (hf.index_n_heads, hf.index_head_dim, hf.index_topk), f"layer {i}"
        if isinstance(layer.ffn, MoeFfn):
            if arch == "DbrxForCausalLM":  # DbrxFFNConfig holds the MoE geometry
                experts, top_k = hf.ffn_config.moe_num_experts, hf.ffn_config.moe_top_k
            else:
                experts = next(getattr(hf, k) for k in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
                               if getattr(hf, k, None))
                top_k = getattr(hf, "num_experts_per_tok", None) or getattr(hf, "top_k_experts", None) or hf.moe_topk
            assert (layer.ffn.experts, layer.ffn.top_k) == (experts, top_k), f"layer {i}"
            assert layer.ffn.zero_experts == (getattr(hf, "zero_expert_num", None) or 0), f"layer {i}"  # LongCat
        if isinstance(attn, GqaAttention) and attn.moa_experts:  # JetMoE: attention experts share the MLP's count
            assert (attn.moa_experts, attn.moa_top_k) == (hf.num_local_experts, hf.num_experts_per_tok), f"layer {i}"


# Persistent buffers that are derived constants, not weights: MiniMaxLightningAttention's decay tables
# (computed from the head count and the layer index; vLLM's minimax_text_01.py recomputes them), which the
# accountant does not count as parameters.
_DERIVED_BUFFERS = frozenset({"slope_rate", "query_decay", "key_decay", "diagonal_decay"})

# Config keys only a checkpoint's remote code reads, with which transformers' class builds a different model
# (Kimi-K3: its remote modeling_kimi_linear adds latent MoE, gated MLA, a full-rank KDA gate and attention
# residuals, and transformers cannot build it at all: hidden_act "situ" is not in ACT2FN). The accountant
# follows vLLM's kimi_linear.py for these; tests/work/test_work_linear_attn.py holds K3 against its model card.
_REMOTE_CODE_KEYS = {"KimiLinearForCausalLM": ("routed_expert_hidden_size", "attn_res_block_size", "mla_use_output_gate")}


# Rows a transformers class allocates that its forward never reads and no checkpoint holds: LongcatFlashExperts
# sizes gate_up_proj for n_routed_experts + zero_expert_num experts (down_proj for n_routed_experts only) and
# sends the zero-computation experts to an identity. Without them LongCat-Flash's class defaults count
# 560.66 B (the model card: 560 B); with them 741.05 B.
_UNREAD_ROWS = {
    "LongcatFlashForCausalLM": lambda hf: hf.num_layers * hf.zero_expert_num * 2 * hf.expert_ffn_hidden_size
    * hf.hidden_size,
}


@pytest.mark.parametrize(("arch", "cfg"), _cases())
def test_parameter_count_equals_the_meta_model(arch: str, cfg: dict[str, Any]):
    if any(key in cfg for key in _REMOTE_CODE_KEYS.get(arch, ())):
        pytest.skip(f"{arch}: the config states keys only its remote code builds (see _REMOTE_CODE_KEYS)")
    hf = _hf_config(arch, cfg)
    with torch.device("meta"):
        model = _hf_class(arch)(hf)
    # Parameters, plus persistent buffers: a checkpoint stores both (DeepSeek-V3's per-expert score
    # correction vector is a buffer in transformers and a tensor in the safetensors files).
    persistent = set(model.state_dict(keep_vars=True))
    buffers = sum(b.numel() for name, b in model.named_buffers()
                  if name in persistent and name.rsplit(".", 1)[-1] not in _DERIVED_BUFFERS)
    meta_total = sum(p.numel() for p in model.parameters()) + buffers - _UNREAD_ROWS.get(arch, lambda _: 0)(hf)
    if arch in WRAPPERS:  # its language-model submodule and LM head only
        meta_total = _language_model_count(model, persistent)
    if arch in TOWERS:  # one class holding towers the accountant does not count (Phi-4-multimodal's encoders)
        inside = tuple(f"{t}." for t in TOWERS[arch])
        held = [*model.named_parameters(), *((n, b) for n, b in model.named_buffers() if n in persistent)]
        meta_total -= sum(t.numel() for n, t in held if n.startswith(inside))
    assert accounting(dict(cfg, architectures=[arch])).params().total == meta_total
