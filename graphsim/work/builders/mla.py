"""DeepSeek-V2/V3 decoders: multi-head latent attention and DeepSeekMoE.

Layer i is MoE when `n_routed_experts` is set, `i >= first_k_dense_replace` and
`i % moe_layer_freq == 0`; other layers use a dense MLP of `intermediate_size`. Shared experts are
one MLP of width `n_shared_experts · moe_intermediate_size`. The score-correction vector exists
when `topk_method` is `noaux_tc` (V3). Multi-token-prediction layers (`num_nextn_predict_layers`)
are not part of the serving forward pass and are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from graphsim.errors import ConfigError
from graphsim.work.builders.common import MLP_BIAS, NEVER, Flag, dense_ffn, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import DsaIndexer, FfnSpec, LayerSpec, MlaAttention, ModelSpec, MoeFfn


@dataclass(frozen=True)
class MlaProfile:
    first_k_dense_default: int  # HF config defaults: V2 0, V3 3
    topk_method_default: str  # V2 "greedy", V3 "noaux_tc"
    sparse_attention: bool = False  # DeepSeek sparse attention: a lightning indexer per layer
    mlp_bias: Flag = MLP_BIAS  # DeepseekV2MLP / V3MLP: bias=config.mlp_bias (shared experts too)
    # MiniCPM3Config.__post_init__: v_head_dim None means hidden_size / num_attention_heads
    v_head_dim_from_hidden: bool = False


DEEPSEEK_V2 = MlaProfile(first_k_dense_default=0, topk_method_default="greedy")
DEEPSEEK_V3 = MlaProfile(first_k_dense_default=3, topk_method_default="noaux_tc")
# GLM-4.7-Flash (Glm4MoeLite): V3's MLA and DeepSeekMoE with the score-correction router; its MLPs take
# no bias (Glm4MoeLiteMLP bias=False) and Glm4MoeLiteConfig.__post_init__ makes only layer 0 dense when
# mlp_layer_types is absent (transformers models/glm4_moe_lite).
GLM4_MOE_LITE = MlaProfile(first_k_dense_default=1, topk_method_default="noaux_tc", mlp_bias=NEVER)
# MiniCPM3: MLA with a dense MLP (bias mlp_bias) in every layer, no MoE; v_head_dim defaults to
# hidden/heads (transformers models/minicpm3 MiniCPM3Config, MiniCPM3Attention).
MINICPM3 = MlaProfile(first_k_dense_default=0, topk_method_default="greedy", v_head_dim_from_hidden=True)
# DeepSeek-V3.2 and GLM-5 (GlmMoeDsa): V3's MLA + DeepSeekMoE (sigmoid router with score correction,
# Glm4MoeLite's router) plus DSA's indexer (transformers models/deepseek_v32, glm_moe_dsa).
# Youtu: MLA with a dense MLP in every layer and no MoE (transformers models/youtu; YoutuMLP bias=False).
YOUTU = MlaProfile(first_k_dense_default=0, topk_method_default="greedy", mlp_bias=NEVER)
# Their MLPs take no bias whatever mlp_bias says (Glm4MoeLiteMLP: bias=False).
DEEPSEEK_V32 = MlaProfile(
    first_k_dense_default=3, topk_method_default="noaux_tc", sparse_attention=True, mlp_bias=NEVER
)


def _moe(view: ConfigView, hidden: int, profile: MlaProfile) -> MoeFfn | None:
    experts = view.opt_int("n_routed_experts", None)
    if experts is None:
        return None
    top_k = view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(
            f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds n_routed_experts {experts}; fix the config"
        )
    width = view.req_int("moe_intermediate_size")
    shared = view.opt_int("n_shared_experts", 0, minimum=0) or 0
    topk_method = view.opt_str("topk_method", profile.topk_method_default)
    return MoeFfn(
        hidden=hidden,
        expert_intermediate=width,
        experts=experts,
        top_k=top_k,
        router_score_bias=topk_method == "noaux_tc",
        shared_intermediate=shared * width,
        shared_bias=profile.mlp_bias.read(view),
        shared_module="shared_experts",
    )


def _indexer_types(view: ConfigView, layers: int) -> tuple[str, ...]:
    """Per layer "full" (own indexer) or "shared" (reuses the previous full layer's top-k).

    `indexer_types`, else `index_topk_pattern` ("F"/"S" per layer), else layer i is full when
    max(i − index_skip_topk_offset + 1, 0) is a multiple of index_topk_freq (defaults 2 and 1: every
    layer full) — GlmMoeDsaConfig.__post_init__ in transformers.
    """
    types = view.opt_str_list("indexer_types")
    if types is None:
        pattern = view.cfg.get("index_topk_pattern")
        if isinstance(pattern, str):
            types = tuple({"F": "full", "S": "shared"}.get(c, c) for c in pattern)
        else:
            freq = max(view.opt_int("index_topk_freq", 1) or 1, 1)
            offset = view.opt_int("index_skip_topk_offset", 2, minimum=0) or 0
            types = tuple("full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(layers))
    if len(types) != layers or any(t not in ("full", "shared") for t in types) or (types and types[0] != "full"):
        raise ConfigError(
            f"config.json ({view.arch}): indexer_types must list 'full' or 'shared' for each of the {layers} layers, "
            "starting with 'full'; fix the config"
        )
    return types


def _indexers(view: ConfigView, hidden: int, q_lora: int | None, layers: int) -> list[DsaIndexer]:
    if q_lora is None:
        raise ConfigError(f"config.json ({view.arch}): sparse attention's indexer reads the q latent; set q_lora_rank")
    full = DsaIndexer(
        hidden=hidden,
        q_lora_rank=q_lora,
        heads=view.req_int("index_n_heads"),
        head_dim=view.req_int("index_head_dim"),
        topk=view.req_int("index_topk"),
    )
    shared = replace(full, shared=True)
    return [full if t == "full" else shared for t in _indexer_types(view, layers)]


def build_mla_decoder(profile: MlaProfile, view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    q_lora = view.opt_int("q_lora_rank", None)
    attn = MlaAttention(
        hidden=frame.hidden,
        heads=frame.heads,
        q_lora_rank=q_lora,
        kv_lora_rank=view.req_int("kv_lora_rank"),
        qk_nope_head_dim=view.req_int("qk_nope_head_dim"),
        qk_rope_head_dim=view.req_int("qk_rope_head_dim"),
        v_head_dim=(view.opt_int("v_head_dim", None) or frame.hidden // frame.heads) if profile.v_head_dim_from_hidden
        else view.req_int("v_head_dim"),
        bias=view.opt_bool("attention_bias", False),
    )
    indexers = _indexers(view, frame.hidden, q_lora, frame.layers) if profile.sparse_attention else None
    moe = _moe(view, frame.hidden, profile)
    first_dense = view.opt_int("first_k_dense_replace", profile.first_k_dense_default, minimum=0)
    freq = view.opt_int("moe_layer_freq", 1)
    kinds = view.opt_str_list("mlp_layer_types")  # transformers 5: "dense" / "sparse" per layer
    if kinds is not None and len(kinds) != frame.layers:
        raise ConfigError(
            f"config.json ({view.arch}): mlp_layer_types has {len(kinds)} entries but num_hidden_layers is "
            f"{frame.layers}; fix the config"
        )
    layers = []
    dense: FfnSpec | None = None
    for i in range(frame.layers):
        if kinds is not None:
            if kinds[i] not in ("dense", "sparse"):
                raise ConfigError(
                    f"config.json ({view.arch}): mlp_layer_types[{i}] '{kinds[i]}' is not dense or sparse; fix the config"
                )
            is_moe = kinds[i] == "sparse"
        else:
            is_moe = i >= first_dense and i % freq == 0
        if moe is not None and is_moe:
            ffn: FfnSpec = moe
        else:
            dense = dense or dense_ffn(view, frame.hidden, bias=profile.mlp_bias)
            ffn = dense
        layers.append(LayerSpec(replace(attn, indexer=indexers[i]) if indexers else attn, ffn))
    notes: tuple[str, ...] = ()
    mtp = view.opt_int("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        notes = (f"{mtp} multi-token-prediction layer(s) (num_nextn_predict_layers) not counted",)
    return finish(view, frame, layers, tie_default=False, notes=notes)
