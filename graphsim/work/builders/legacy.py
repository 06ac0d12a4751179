"""GPT-era decoders: learned or fixed absolute positions, ALiBi, fused and multi-query attention.

Each architecture below is an explicit mapping read off its transformers 5.24 modelling and
configuration files (`models/<family>/modeling_<family>.py`, `configuration_<family>.py`): which
linear layers take a bias and from which config key, which LayerNorms a block owns (all of them
LayerNorms with a bias unless stated), the MLP width rule, positions, the LM head. Every
dimension comes from the config (with the config class's defaults, `config_defaults.json`).

Mechanisms these families add to the GQA specs, and how they are expressed:
- learned absolute position embeddings (GPT-2, GPT-BigCode, GPT-Neo, OpenAI-GPT, OPT, BioGPT): a
  (rows × hidden) table in `embed_extras`, kind EMBEDDING: parameters, one row gathered per new
  token (the accountant reads min(T, rows) rows, as for the token table). OPT and BioGPT add an
  offset of 2 to the position ids, so their tables hold max_position_embeddings + 2 rows
  (OPTLearnedPositionalEmbedding / BioGptLearnedPositionalEmbedding: `num_embeddings + self.offset`).
  A step whose sequences run past the positions the table indexes is refused (`ModelSpec.max_positions`).
- fixed positions: rotary (GPT-J, CodeGen, GPT-NeoX-Japanese, Falcon without ALiBi), ALiBi (BLOOM,
  MPT, Falcon with `alibi`) and sinusoidal tables (XGLM, CTRL: non-persistent buffers computed at
  init) hold no parameters. Their work is elementwise (rotating q/k; ALiBi adds one bias per scored
  pair, S·H additions per layer) and, by the accountant's convention, not counted: an ALiBi model's
  attention FLOPs are 2·S·H·(d_qk + d_v) like any softmax attention (docs/work.md, Conventions).
- an embedding LayerNorm (BLOOM's word_embeddings_layernorm): weight and bias in `embed_extras`.
- a narrower word-embedding table with project_in / project_out (OPT-350m's word_embed_proj_dim):
  `ModelSpec.embed_width`; project_in is applied to every new token (segment `embed`), project_out
  only to the sampled rows, with the head (segment `head`).
- fused QKV projections (GPT-2 c_attn, BLOOM/Falcon query_key_value, CodeGen qkv_proj, MPT Wqkv) have
  the element count and FLOPs of separate q/k/v projections: the specs keep them split.
- multi-query attention (GPT-BigCode `multi_query`, Falcon `multi_query`): one KV head, KV bytes per
  token 2·head_dim per layer; Falcon's `new_decoder_architecture` groups `num_kv_heads` KV heads.
- post-norm blocks (OpenAI-GPT, OPT with do_layer_norm_before false) own the same norms as pre-norm
  ones; only where a final norm exists differs.

Module paths in the weight tables keep the GQA names (`self_attn.q_proj`, `mlp.up_proj`), not these
checkpoints' (`attn.c_attn`, `mlp.c_fc`): a quantized checkpoint's `modules_to_not_convert` naming
these modules is not matched.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from graphsim.errors import ConfigError
from graphsim.work.builders.common import Frame, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import DenseFfn, GqaAttention, LayerSpec, ModelSpec, Weight, WeightKind


@dataclass(frozen=True)
class Decoder:
    """One GPT-era decoder's traits, resolved from its config by the architecture's function below."""

    kv_heads: int
    intermediate: int
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    attn_norms: int = 1
    ffn_norms: int = 1  # 0: a parallel block whose attention and MLP read one input norm (GPT-J)
    norm_bias: bool = True  # LayerNorms with a bias (block norms and the final norm)
    final_norm: bool = True
    head_bias: bool = False
    tie_default: bool = True
    positions: int = 0  # positions a learned absolute position table indexes (0: no position parameters)
    position_offset: int = 0  # extra rows before them (OPT, BioGPT: position ids + 2)
    table_positions: int = 0  # a fixed (sinusoidal) table's rows: no parameters, but the same bound (CTRL)
    embed_norm: bool = False  # a LayerNorm on the embedding output (BLOOM)
    embed_width: int | None = None  # word-embedding width when project_in/out map it to hidden (OPT)
    windows: tuple[int | None, ...] | None = None  # per layer, a local window (GPT-Neo); None: all full
    o_bias_layers: frozenset[int] | None = None  # layers whose output projection has a bias, if not all


def _head_dim(view: ConfigView, frame: Frame) -> int:
    """hidden / heads: these classes derive it and ignore any `head_dim` key."""
    if frame.hidden % frame.heads:
        raise ConfigError(
            f"config.json ({view.arch}): hidden size {frame.hidden} is not divisible by the {frame.heads} attention "
            "heads; fix the config"
        )
    return frame.hidden // frame.heads


def _no_cross_attention(view: ConfigView) -> None:
    if view.opt_bool("add_cross_attention", False):
        raise ConfigError(
            f"config.json ({view.arch}): add_cross_attention is true (an encoder-decoder's decoder); the work "
            "accountant covers decoder-only models: set it to false"
        )


def _with_n_embed(view: ConfigView) -> ConfigView:
    """BloomConfig / FalconConfig.__post_init__ take a legacy `n_embed` kwarg as hidden_size (BLOOM's hub
    configs state `n_embed`)."""
    if "n_embed" in view.cfg and "hidden_size" not in view.cfg:
        return ConfigView(dict(view.cfg, hidden_size=view.cfg["n_embed"]), view.arch)
    return view


def _assemble(view: ConfigView, frame: Frame, d: Decoder) -> ModelSpec:
    head_dim = _head_dim(view, frame)
    if frame.heads % d.kv_heads:
        raise ConfigError(
            f"config.json ({view.arch}): {frame.heads} attention heads are not a multiple of {d.kv_heads} KV heads; "
            "fix the config"
        )
    ffn = DenseFfn(hidden=frame.hidden, intermediate=d.intermediate, gated=False, bias=d.mlp_bias,
                   block_norms=d.ffn_norms)
    windows = d.windows or (None,) * frame.layers
    layers = []
    for i, window in enumerate(windows):
        attn = GqaAttention(
            hidden=frame.hidden,
            heads=frame.heads,
            kv_heads=d.kv_heads,
            head_dim=head_dim,
            window=window,
            q_bias=d.qkv_bias,
            kv_bias=d.qkv_bias,
            o_bias=d.o_bias if d.o_bias_layers is None else i in d.o_bias_layers,
            block_norms=d.attn_norms,
        )
        layers.append(LayerSpec(attn, ffn))
    spec = finish(view, frame, layers, d.tie_default, norm_bias=d.norm_bias)
    extras: list[Weight] = []
    if d.positions:
        rows = d.positions + d.position_offset
        extras.append(Weight("embed", "embed_positions", WeightKind.EMBEDDING, (rows, frame.hidden), quantizable=False))
    if d.embed_norm:
        extras += [Weight("embed", "embed_layernorm", WeightKind.NORM, (frame.hidden,)),
                   Weight("embed", "embed_layernorm", WeightKind.BIAS, (frame.hidden,))]
    width = d.embed_width if d.embed_width is not None and d.embed_width != frame.hidden else None
    return replace(spec, embed_extras=tuple(extras), head_bias=d.head_bias, final_norm=d.final_norm,
                   embed_width=width, max_positions=d.positions or d.table_positions or None)


def _inner(view: ConfigView, frame: Frame, key: str) -> int:
    """`n_inner` / `intermediate_size` when set, else 4·hidden (GPT2Block, GPTJBlock, GPTNeoBlock: inner_dim)."""
    return view.opt_int(key, 4 * frame.hidden)


# --- the architectures ------------------------------------------------------------------------


def gpt2(view: ConfigView) -> ModelSpec:
    """models/gpt2 (GPT2Model, GPT2Block, GPT2Attention, GPT2MLP): Conv1D c_attn (3·hidden) and c_proj with
    biases, ln_1 / ln_2 / ln_f LayerNorms, an ungated biased c_fc → gelu → c_proj MLP of n_inner (None:
    4·hidden), learned positions wpe (n_positions rows), tied lm_head without bias."""
    _no_cross_attention(view)
    frame = read_frame(view)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=_inner(view, frame, "n_inner"), qkv_bias=True, o_bias=True, mlp_bias=True,
        positions=view.req_int("max_position_embeddings"),
    ))


def gpt_bigcode(view: ConfigView) -> ModelSpec:
    """models/gpt_bigcode (GPTBigCodeAttention): GPT-2's layout with c_attn of hidden + 2·kv_heads·head_dim,
    kv_heads = 1 when multi_query (the default) else the head count; nn.Linear everywhere, all biased."""
    _no_cross_attention(view)
    frame = read_frame(view)
    kv = 1 if view.opt_bool("multi_query", True) else frame.heads
    return _assemble(view, frame, Decoder(
        kv_heads=kv, intermediate=_inner(view, frame, "n_inner"), qkv_bias=True, o_bias=True, mlp_bias=True,
        positions=view.req_int("max_position_embeddings"),
    ))


def gptj(view: ConfigView) -> ModelSpec:
    """models/gptj (GPTJBlock, GPTJAttention, GPTJMLP): a parallel block on one ln_1; q/k/v/out_proj without
    bias; biased fc_in → gelu → fc_out of n_inner (None: 4·n_embd); partial rotary (rotary_dim, no
    parameters); an lm_head with a bias (nn.Linear default), untied by default."""
    frame = read_frame(view)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=_inner(view, frame, "n_inner"), qkv_bias=False, o_bias=False,
        mlp_bias=True, ffn_norms=0, head_bias=True, tie_default=False,
    ))


def codegen(view: ConfigView) -> ModelSpec:
    """models/codegen (CodeGenBlock, CodeGenAttention): GPT-J's block with a fused qkv_proj (3·hidden, no
    bias), out_proj without bias, rotary on rotary_dim, a biased lm_head, untied by default."""
    frame = read_frame(view)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=_inner(view, frame, "n_inner"), qkv_bias=False, o_bias=False,
        mlp_bias=True, ffn_norms=0, head_bias=True, tie_default=False,
    ))


def gpt_neo(view: ConfigView) -> ModelSpec:
    """models/gpt_neo (GPTNeoSelfAttention, GPTNeoBlock): q/k/v without bias, out_proj with; a biased c_fc →
    c_proj MLP of intermediate_size (None: 4·hidden); learned positions (max_position_embeddings rows).
    Layer kinds come from attention_types ([[kinds, repeat], …], default [[["global", "local"], 12]],
    GPTNeoConfig.__post_init__ / expand_attention_types_params); a "local" layer masks all but the last
    window_size positions, the query included (`bias ^ tril(bias, -window_size)`): window W = window_size."""
    frame = read_frame(view)
    types = view.cfg.get("attention_types", [[["global", "local"], 12]])
    kinds = _expand_attention_types(view, types)
    if len(kinds) != frame.layers:
        raise ConfigError(
            f"config.json ({view.arch}): attention_types expands to {len(kinds)} layers but num_layers is "
            f"{frame.layers}; fix the config"
        )
    window = view.req_int("window_size")
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=_inner(view, frame, "intermediate_size"), qkv_bias=False, o_bias=True,
        mlp_bias=True, positions=view.req_int("max_position_embeddings"),
        windows=tuple(window if kind == "local" else None for kind in kinds),
    ))


def _expand_attention_types(view: ConfigView, types: Any) -> list[str]:
    out: list[str] = []
    ok = isinstance(types, list)
    for item in types if ok else ():
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], list) and isinstance(item[1], int)
                and all(k in ("global", "local") for k in item[0])):
            ok = False
            break
        out += item[0] * item[1]
    if not ok:
        raise ConfigError(
            f"config.json ({view.arch}): attention_types must be a list of [[\"global\"|\"local\", …], repeat] pairs; "
            "fix the config"
        )
    return out


def opt(view: ConfigView) -> ModelSpec:
    """models/opt (OPTDecoder, OPTDecoderLayer, OPTAttention): q/k/v/out_proj and fc1/fc2 biased by enable_bias;
    self_attn_layer_norm and final_layer_norm in every layer (post-norms when do_layer_norm_before is false),
    no weights at all when layer_norm_elementwise_affine is false; the decoder's final_layer_norm only when
    do_layer_norm_before and not _remove_final_layer_norm; learned positions with an offset of 2
    (max_position_embeddings + 2 rows); a word-embedding table of word_embed_proj_dim (None: hidden) with
    unbiased project_in / project_out when it differs from hidden; a tied lm_head without bias."""
    frame = read_frame(view)
    bias = view.opt_bool("enable_bias", True)
    affine = view.opt_bool("layer_norm_elementwise_affine", True)
    final = view.opt_bool("do_layer_norm_before", True) and not view.opt_bool("_remove_final_layer_norm", False)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=view.req_int("ffn_dim"), qkv_bias=bias, o_bias=bias, mlp_bias=bias,
        attn_norms=1 if affine else 0, ffn_norms=1 if affine else 0, final_norm=final and affine,
        positions=view.req_int("max_position_embeddings"), position_offset=2,
        embed_width=view.opt_int("word_embed_proj_dim", frame.hidden),
    ))


def bloom(view: ConfigView) -> ModelSpec:
    """models/bloom (BloomModel, BloomBlock, BloomAttention, BloomMLP): ALiBi (no position parameters), a
    LayerNorm on the word embeddings (word_embeddings_layernorm), biased query_key_value (3·hidden) and
    dense, input/post-attention LayerNorms, a biased dense_h_to_4h → gelu → dense_4h_to_h MLP of 4·hidden,
    ln_f, a tied lm_head without bias."""
    view = _with_n_embed(view)
    frame = read_frame(view)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=4 * frame.hidden, qkv_bias=True, o_bias=True, mlp_bias=True,
        embed_norm=True,
    ))


def falcon(view: ConfigView) -> ModelSpec:
    """models/falcon (FalconAttention, FalconDecoderLayer, FalconMLP): query_key_value and dense biased by
    `bias`; KV heads: num_kv_heads (None: the head count) with new_decoder_architecture, else 1 when
    multi_query, else the head count (qkv 3·hidden); an ungated dense_h_to_4h → dense_4h_to_h MLP of
    ffn_hidden_size (None: 4·hidden) biased by `bias`. Norms: input_layernorm and post_attention_layernorm
    without parallel_attn; with it ln_attn and ln_mlp when num_ln_in_parallel_attn is 2 (the default under
    new_decoder_architecture), else one shared input_layernorm. Rotary or ALiBi (`alibi`): no parameters.
    ln_f; a tied lm_head without bias."""
    view = _with_n_embed(view)
    frame = read_frame(view)
    new_arch = view.opt_bool("new_decoder_architecture", False)
    if new_arch:
        kv = view.opt_int("num_kv_heads", frame.heads)
    else:
        kv = 1 if view.opt_bool("multi_query", True) else frame.heads
    bias = view.opt_bool("bias", False)
    parallel_norms = view.opt_int("num_ln_in_parallel_attn", 2 if new_arch else 1)
    ffn_norms = 1 if not view.opt_bool("parallel_attn", True) or parallel_norms == 2 else 0
    return _assemble(view, frame, Decoder(
        kv_heads=kv, intermediate=view.opt_int("ffn_hidden_size", 4 * frame.hidden), qkv_bias=bias, o_bias=bias,
        mlp_bias=bias, ffn_norms=ffn_norms,
    ))


def mpt(view: ConfigView) -> ModelSpec:
    """models/mpt (MptModel, MptBlock, MptAttention, MptMLP): ALiBi always (no position table), Wqkv (3·d_model)
    and out_proj without bias, an up_proj → gelu → down_proj MLP of 4·d_model without bias, norm_1 / norm_2 /
    norm_f LayerNorms whose bias transformers sets to None. transformers builds these shapes whatever
    expansion_ratio, no_bias, attn_config.attn_type or attn_config.qk_ln say; a config that states
    otherwise describes a checkpoint transformers cannot load, and is refused."""
    frame = read_frame(view)
    attn = view.cfg.get("attn_config") or {}
    problems = []
    if view.opt_int("expansion_ratio", 4) != 4:
        problems.append("expansion_ratio is not 4")
    if not view.opt_bool("no_bias", True):
        problems.append("no_bias is false")
    if isinstance(attn, dict) and attn.get("attn_type", "multihead_attention") != "multihead_attention":
        problems.append(f"attn_config.attn_type is {attn.get('attn_type')!r}")
    if isinstance(attn, dict) and attn.get("qk_ln"):
        problems.append("attn_config.qk_ln is true")
    if isinstance(attn, dict) and attn.get("alibi") is False:
        problems.append("attn_config.alibi is false")
    if problems:
        raise ConfigError(
            f"config.json ({view.arch}): {', '.join(problems)}; transformers' MptForCausalLM builds a bias-free "
            "multi-head ALiBi model with a 4·d_model MLP regardless, so the accountant cannot follow it: fix the config"
        )
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=4 * frame.hidden, qkv_bias=False, o_bias=False, mlp_bias=False,
        norm_bias=False,
    ))


def xglm(view: ConfigView) -> ModelSpec:
    """models/xglm (XGLMModel, XGLMDecoderLayer, XGLMAttention): sinusoidal positions (a non-persistent
    buffer: no parameters), biased q/k/v/out_proj, self_attn_layer_norm and final_layer_norm per layer, a
    biased fc1 → gelu → fc2 MLP of ffn_dim, the model's layer_norm, a tied lm_head without bias."""
    _no_cross_attention(view)
    frame = read_frame(view)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=view.req_int("ffn_dim"), qkv_bias=True, o_bias=True, mlp_bias=True,
    ))


def ctrl(view: ConfigView) -> ModelSpec:
    """models/ctrl (CTRLModel, EncoderLayer, MultiHeadAttention): sinusoidal positions (pos_encoding, a
    non-persistent buffer of n_positions rows indexed by position id: no parameters, but no position past
    them; XGLM's table grows instead), biased Wq/Wk/Wv/dense, layernorm1/layernorm2, a biased Linear → ReLU → Linear
    FFN of dff, the final layernorm, an lm_head with a bias (tied matrix)."""
    frame = read_frame(view)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=view.req_int("dff"), qkv_bias=True, o_bias=True, mlp_bias=True,
        head_bias=True, table_positions=view.req_int("max_position_embeddings"),
    ))


def openai_gpt(view: ConfigView) -> ModelSpec:
    """models/openai (OpenAIGPTModel, Block, Attention, MLP): biased Conv1D c_attn (3·n_embd) and c_proj,
    post-norms ln_1 (after attention) and ln_2 (after the MLP), a biased c_fc → c_proj MLP of 4·n_embd, no
    final norm, learned positions (n_positions rows), a tied lm_head without bias."""
    frame = read_frame(view)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=4 * frame.hidden, qkv_bias=True, o_bias=True, mlp_bias=True,
        final_norm=False, positions=view.req_int("max_position_embeddings"),
    ))


def biogpt(view: ConfigView) -> ModelSpec:
    """models/biogpt (BioGptModel, BioGptDecoderLayer, BioGptAttention): OPT-like pre-norm layers with biased
    q/k/v/out_proj and fc1/fc2 (intermediate_size), learned positions with an offset of 2
    (max_position_embeddings + 2 rows), the model's layer_norm, a tied output_projection without bias."""
    frame = read_frame(view)
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=view.req_int("intermediate_size"), qkv_bias=True, o_bias=True,
        mlp_bias=True, positions=view.req_int("max_position_embeddings"), position_offset=2,
    ))


def gpt_neox_japanese(view: ConfigView) -> ModelSpec:
    """models/gpt_neox_japanese (GPTNeoXJapaneseLayer, GPTNeoXJapaneseAttention, GPTNeoXJapaneseMLP):
    query_key_value (3·hidden) and dense without bias; a separate dense_bias vector (hidden) only in the
    last layer (`use_bias=layer_number == num_hidden_layers - 1`); an unbiased dense_h_to_4h → gelu →
    dense_4h_to_h MLP of int(hidden·intermediate_multiple_size); input/post-attention LayerNorms,
    final_layer_norm; partial rotary (no parameters); a tied embed_out without bias."""
    frame = read_frame(view)
    multiple = view.cfg.get("intermediate_multiple_size", view.defaults.get("intermediate_multiple_size", 4))
    if isinstance(multiple, bool) or not isinstance(multiple, (int, float)) or multiple <= 0:
        raise ConfigError(
            f"config.json ({view.arch}) field 'intermediate_multiple_size' is {multiple!r}, not a positive number; "
            "fix the config"
        )
    return _assemble(view, frame, Decoder(
        kv_heads=frame.heads, intermediate=int(frame.hidden * multiple), qkv_bias=False, o_bias=False,
        mlp_bias=False, o_bias_layers=frozenset({frame.layers - 1}),
    ))


ARCHITECTURES: dict[str, Callable[[ConfigView], ModelSpec]] = {
    "GPT2LMHeadModel": gpt2,
    "GPTBigCodeForCausalLM": gpt_bigcode,
    "GPTJForCausalLM": gptj,
    "CodeGenForCausalLM": codegen,
    "GPTNeoForCausalLM": gpt_neo,
    "OPTForCausalLM": opt,
    "BloomForCausalLM": bloom,
    "FalconForCausalLM": falcon,
    "MptForCausalLM": mpt,
    "XGLMForCausalLM": xglm,
    "CTRLLMHeadModel": ctrl,
    "OpenAIGPTLMHeadModel": openai_gpt,
    "BioGptForCausalLM": biogpt,
    "GPTNeoXJapaneseForCausalLM": gpt_neox_japanese,
}
