"""DeepSeek-V4 (V4-Flash, V4-Pro): compressed-KV attention, hyper-connections, hash-routed MoE.

Read from transformers 5.24 models/deepseek_v4 (configuration_deepseek_v4.py DeepseekV4Config,
modeling_deepseek_v4.py); vLLM's implementation (vllm/model_executor/models/deepseek_v4.py,
vllm/model_executor/layers/deepseek_v4_attention.py, deepseek_compressor.py) gives the cache layout.

- Attention (`CompressedAttention`, every layer): shared-KV MQA over a sliding window of
  `sliding_window` positions, with per-layer `layer_types`:
  `sliding_attention` (window only), `compressed_sparse_attention` (CSA: + a compressor at
  `compress_rates[csa]` with overlapping windows and a lightning indexer keeping `index_topk`
  entries) or `heavily_compressed_attention` (HCA: + a compressor at `compress_rates[hca]`, every
  entry attended). DeepseekV4Config.__post_init__ resolves the schedule: `layer_types`, else the
  legacy per-layer `compress_ratios` (0 / 4 / 128 → sliding / CSA / HCA, truncated to the layer
  count: the checkpoints list one more for the MTP layer), else 2 HCA then CSA/HCA alternating;
  `compress_rates` (else the legacy `compress_rate_csa` / `compress_rate_hca`, else 4 / 128).
  The rotary slice is head_dim · partial_rotary_factor (else the legacy qk_rope_head_dim, else 64/512
  of head_dim).
- Hyper-connections (mHC, `hc_mult` = n streams): every layer holds `attn_hc` and `ffn_hc` (segments
  `layers[…].attn.hc` and `layers[…].ffn.hc`)
  (DeepseekV4HyperConnection: fn ((2 + n)·n × n·hidden), base ((2 + n)·n), scale (3), fp32), the
  model a `hc_head` (DeepseekV4HyperHead: hc_fn (n × n·hidden), hc_base (n), hc_scale (1)). The fn
  projections are weight matmuls on every token; the stream mixing is elementwise.
- MoE in every layer (DeepseekV4SparseMoeBlock): `n_routed_experts` experts of
  `moe_intermediate_size`, top-`num_experts_per_tok`, a router weight, and ONE shared expert of
  `moe_intermediate_size` (DeepseekV4MLP reads `intermediate_size`, which the config class maps to
  moe_intermediate_size; transformers does not read `n_shared_experts`). `mlp_layer_types`
  (else the legacy `num_hash_layers`, else 3) makes the first layers `hash_moe`: the expert choice is a
  frozen token-id → experts table (`tid2eid`, vocab × top-k int64, a persistent buffer; looked up per
  token like an embedding); the other layers carry the score-correction vector
  (`e_score_correction_bias`).
- The multi-token-prediction layer (`num_nextn_predict_layers`) is not built by transformers and is
  not counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from graphsim.errors import ConfigError
from graphsim.work.builders.common import MLP_BIAS, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import CompressedAttention, KvCompressor, LayerSpec, ModelSpec, MoeFfn, Weight, WeightKind

SLIDING, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
# DeepseekV4Config: _COMPRESS_RATIO_TO_LAYER_TYPE (legacy compress_ratios), default_compress_rates
_RATIO_TO_TYPE = {0: SLIDING, 4: CSA, 128: HCA}
_DEFAULT_RATES = {CSA: 4, HCA: 128}
_DEFAULT_HASH_LAYERS = 3  # DeepseekV4Config.default_num_hash_layers
_DEFAULT_ROPE_FRACTION = 64 / 512  # DeepseekV4Config.default_partial_rotary_factor


@dataclass(frozen=True)
class _Schedule:
    attention: tuple[str, ...]
    mlp: tuple[str, ...]
    rates: dict[str, int]


def _schedule(view: ConfigView, layers: int) -> _Schedule:
    """DeepseekV4Config.__post_init__'s resolution of layer_types, mlp_layer_types and compress_rates."""
    cfg = view.cfg
    rates = dict(_DEFAULT_RATES)
    stated = cfg.get("compress_rates")
    if isinstance(stated, dict):
        rates.update(stated)
    for key, kind in (("compress_rate_csa", CSA), ("compress_rate_hca", HCA)):
        if cfg.get(key) is not None:
            rates[kind] = cfg[key]
    for kind, rate in rates.items():
        if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
            raise ConfigError(f"config.json ({view.arch}): compress rate of {kind} is {rate!r}; give a positive integer")
    types = view.opt_str_list("layer_types")
    if types is None and isinstance(cfg.get("compress_ratios"), list):
        legacy = cfg["compress_ratios"]
        bad = [r for r in legacy if r not in _RATIO_TO_TYPE]
        if bad:
            raise ConfigError(
                f"config.json ({view.arch}): compress_ratios holds {bad[0]!r}; use 0 (sliding), 4 (CSA) or 128 (HCA)"
            )
        types = tuple(_RATIO_TO_TYPE[r] for r in legacy)
    if types is None:
        types = tuple([HCA] * min(layers, 2) + [CSA if i % 2 else HCA for i in range(max(layers - 2, 0))])
    types = types[:layers]
    mlp = view.opt_str_list("mlp_layer_types")
    if mlp is None:
        hashed = view.opt_int("num_hash_layers", _DEFAULT_HASH_LAYERS, minimum=0)
        mlp = tuple(["hash_moe"] * min(layers, hashed) + ["moe"] * max(0, layers - hashed))
    mlp = mlp[:layers]
    for name, got, allowed in (("layer_types", types, (SLIDING, CSA, HCA)), ("mlp_layer_types", mlp, ("hash_moe", "moe"))):
        if len(got) != layers or any(t not in allowed for t in got):
            raise ConfigError(
                f"config.json ({view.arch}): {name} must list one of {', '.join(allowed)} for each of the {layers} "
                "layers; fix the config"
            )
    return _Schedule(types, mlp, rates)


def _rope_dim(view: ConfigView, head_dim: int) -> int:
    fraction = view.cfg.get("partial_rotary_factor")
    if fraction is None:
        legacy = view.opt_int("qk_rope_head_dim", None)
        fraction = legacy / head_dim if legacy is not None else _DEFAULT_ROPE_FRACTION
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ConfigError(f"config.json ({view.arch}): partial_rotary_factor is {fraction!r}; give a value in (0, 1]")
    return int(head_dim * fraction)


def _hc_weights(prefix: str, streams: int, hidden: int, outputs: int, scales: int, names: tuple[str, str, str]) -> tuple[Weight, ...]:
    """A hyper-connection's projection (outputs × streams·hidden, a matmul on every token), bias and scales;
    fp32 in the checkpoint (DeepseekV4PreTrainedModel._keep_in_fp32_modules_strict)."""
    fn, base, scale = names
    return (
        Weight("hc", f"{prefix}.{fn}", WeightKind.MATRIX, (outputs, streams * hidden), quantizable=False, element_bytes=4),
        Weight("hc", f"{prefix}.{base}", WeightKind.VECTOR, (outputs,), element_bytes=4),
        Weight("hc", f"{prefix}.{scale}", WeightKind.VECTOR, (scales,), element_bytes=4),
    )


def build_deepseek_v4(view: ConfigView) -> ModelSpec:
    frame = read_frame(view)
    hidden = frame.hidden
    head_dim = view.req_int("head_dim")
    q_lora = view.req_int("q_lora_rank")
    o_groups = view.req_int("o_groups")
    if (frame.heads * head_dim) % o_groups:
        raise ConfigError(
            f"config.json ({view.arch}): num_attention_heads·head_dim {frame.heads * head_dim} is not divisible by "
            f"o_groups {o_groups}; fix the config"
        )
    notes: list[str] = []
    kv_heads = view.opt_int("num_key_value_heads", 1)
    if kv_heads != 1:  # transformers builds it regardless (num_key_value_groups = num_attention_heads)
        notes.append(f"num_key_value_heads {kv_heads} is not read: DeepseekV4Attention projects one shared K=V head "
                     "(kv_proj → head_dim)")
    sched = _schedule(view, frame.layers)
    base = CompressedAttention(
        hidden=hidden, heads=frame.heads, head_dim=head_dim, rope_dim=_rope_dim(view, head_dim), q_lora_rank=q_lora,
        o_groups=o_groups, o_lora_rank=view.req_int("o_lora_rank"), window=view.req_int("sliding_window"),
    )
    index_head_dim = view.req_int("index_head_dim")
    by_type = {
        SLIDING: base,
        # DeepseekV4CSACompressor (overlapping windows, 2·head_dim projections) + DeepseekV4Indexer (its own
        # overlapping compressor at index_head_dim, q_b_proj from the q latent, weights_proj)
        CSA: replace(
            base, compressor=KvCompressor(sched.rates[CSA], head_dim, overlap=True),
            index_compressor=KvCompressor(sched.rates[CSA], index_head_dim, overlap=True),
            index_heads=view.req_int("index_n_heads"), index_topk=view.req_int("index_topk"),
        ),
        # DeepseekV4HCACompressor: disjoint windows, head_dim projections, no indexer
        HCA: replace(base, compressor=KvCompressor(sched.rates[HCA], head_dim, overlap=False)),
    }
    experts, top_k = view.req_int("n_routed_experts"), view.req_int("num_experts_per_tok")
    if top_k > experts:
        raise ConfigError(
            f"config.json ({view.arch}): num_experts_per_tok {top_k} exceeds n_routed_experts {experts}; fix the config"
        )
    width = view.req_int("moe_intermediate_size")
    moe = {
        kind: MoeFfn(
            hidden=hidden, expert_intermediate=width, experts=experts, top_k=top_k,
            router_score_bias=kind == "moe",  # DeepseekV4TopKRouter.e_score_correction_bias; the hash router has none
            shared_intermediate=width, shared_bias=MLP_BIAS.read(view),
        )
        for kind in ("hash_moe", "moe")
    }
    streams = view.opt_int("hc_mult", 4)
    mixes = (2 + streams) * streams  # pre (n), post (n), comb (n × n)
    attn_hc = _hc_weights("attn_hc", streams, hidden, mixes, 3, ("fn", "base", "scale"))
    ffn_hc = _hc_weights("ffn_hc", streams, hidden, mixes, 3, ("fn", "base", "scale"))
    layers = [
        LayerSpec(by_type[a], moe[m], attn_extras=attn_hc, ffn_extras=ffn_hc)
        for a, m in zip(sched.attention, sched.mlp, strict=True)
    ]
    mtp = view.opt_int("num_nextn_predict_layers", 0, minimum=0)
    if mtp:
        notes.append(f"{mtp} multi-token-prediction layer(s) (num_nextn_predict_layers) not counted")
    shared = view.opt_int("n_shared_experts", 1, minimum=0)
    if shared != 1:
        notes.append(f"n_shared_experts {shared} is not read by transformers' DeepseekV4SparseMoeBlock: one shared "
                     f"expert of moe_intermediate_size {width} counted")
    spec = finish(view, frame, layers, tie_default=False, notes=tuple(notes))
    # DeepseekV4HashRouter.tid2eid (vocab × top_k, torch.long): one table per hash layer, a row looked up per
    # token like an embedding; a per-layer extra would put it on every layer, so the tables sit with the embedding.
    tables = tuple(
        Weight("embed", f"layers.{i}.mlp.gate.tid2eid", WeightKind.EMBEDDING, (frame.vocab, top_k),
               quantizable=False, element_bytes=8)
        for i, kind in enumerate(sched.mlp) if kind == "hash_moe"
    )
    head = _hc_weights("hc_head", streams, hidden, streams, 1, ("hc_fn", "hc_base", "hc_scale"))
    return replace(spec, embed_extras=tables, final_extras=head)


ARCHITECTURES = {"DeepseekV4ForCausalLM": build_deepseek_v4}
