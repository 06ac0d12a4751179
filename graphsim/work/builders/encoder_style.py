"""Encoder-style causal LMs and the decoder halves of encoder–decoder models (issue 20, the long tail).

Transformers maps these classes as causal LMs (AutoModelForCausalLM). Each is a stack of multi-head
attention and an ungated GELU MLP with biased projections and LayerNorms with a bias (post-LN for the
BERT family, pre-LN for the sequence-to-sequence decoders), absolute positions and, for the BERT family,
an LM-head transform. Each class below is an explicit mapping read off its transformers 5.24 modelling
file (`models/<family>/modeling_<family>.py`): which tables the embedding holds, which linear layers
take a bias, which norms exist, the head. Every dimension comes from the config (with the config
class's defaults, `config_defaults.json`).

The traits, and how they are expressed:
- absolute positions: a learned table (BERT's position_embeddings, BART's embed_positions with its
  offset of 2 rows: BartLearnedPositionalEmbedding `num_embeddings + self.offset`), or a sinusoidal
  table transformers keeps as a parameter (Marian/Pegasus *SinusoidalPositionalEmbedding are
  nn.Embedding; RoFormer's (positions × head_dim) table): `embed_extras`, kind EMBEDDING, one row per
  new token. Sinusoidal tables computed at init and never stored (MusicGen's non-persistent buffer,
  TrOCR's sinusoidal module) hold no parameters. A stored table bounds the sequence: a step running
  past the positions it indexes is refused (`ModelSpec.max_positions`; RoBERTa's ids start after
  the padding index, so max_position_embeddings − pad_token_id − 1 tokens).
- token-type tables (type_vocab_size rows), ERNIE's task-type table, XLM's language table, RoCBERT's
  shape and pronunciation tables: `embed_extras`, EMBEDDING.
- the embedding LayerNorm (BERT's embeddings.LayerNorm, BART's layernorm_embedding): `embed_extras`.
- a factorised token table (ELECTRA's / RoFormer's embedding_size E, RemBERT's input_embedding_size):
  `ModelSpec.table_width`, with the biased projection to hidden (embeddings_project,
  embedding_hidden_mapping_in) in `embed_extras` (every new token).
- the LM-head transform (BERT's cls.predictions.transform: dense + bias, activation, LayerNorm;
  ELECTRA's generator_predictions and RemBERT's cls.predictions map hidden to the head's width):
  `ModelSpec.head_extras`, applied to the sampled rows only, like the head. The head's bias
  (cls.predictions.bias) is `head_bias`.
- cross-attention (BERT-family `add_cross_attention`, every BART-style decoder's encoder_attn and its
  LayerNorm): the weights exist but a decoder-only forward has no encoder states, so they do no
  work: `LayerSpec.attn_extras` marked `idle` (parameters and stored bytes, no reads, no FLOPs, not
  activated), stated in a note. BigBird's pooler is idle the same way (its output is not the logits),
  as are GIT's image encoder (a text-only forward) and Mllama's cross-attention layers, which its text
  model skips whole without image states (no mixer, no FFN, no KV: `NoAttention` / `NoFfn` layers).
- KV per token is the self-attention's K and V only (multi-head: heads × head_dim each).

Module paths in the weight tables keep the GQA names (`self_attn.q_proj`, `mlp.up_proj`), not these
checkpoints' (`attention.self.query`, `fc1`): a quantized checkpoint's `modules_to_not_convert` naming
these modules is not matched.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

from graphsim.errors import ConfigError
from graphsim.work.builders.common import ALWAYS, NEVER, Flag, Frame, finish, read_frame
from graphsim.work.config import ConfigView
from graphsim.work.specs import DenseFfn, GqaAttention, LayerSpec, ModelSpec, NoAttention, NoFfn, Weight, WeightKind

M, NORM, BIAS, EMB = WeightKind.MATRIX, WeightKind.NORM, WeightKind.BIAS, WeightKind.EMBEDDING
ADD_CROSS = Flag("add_cross_attention", False)  # the BERT family's cross-attention switch


@dataclass(frozen=True)
class EncoderStyle:
    """One family's traits (the class's modelling code); dimensions come from the config."""

    layers_key: str = "num_hidden_layers"
    heads_key: str = "num_attention_heads"
    ffn_key: str | None = "intermediate_size"  # None: 4 × hidden (XLM's TransformerFFN)
    positions_key: str | None = "max_position_embeddings"  # rows of the stored position table; None: none
    position_offset: int = 0  # BART-style learned tables hold 2 more rows than positions
    # RoBERTa's position ids start after the padding index (create_position_ids_from_input_ids: padding_idx + 1
    # onward), so the table indexes max_position_embeddings − pad_token_id − 1 tokens
    positions_after_padding: bool = False
    positions: Flag = ALWAYS  # TrOCR: use_learned_position_embeddings (else sinusoidal, not stored)
    token_types: bool = True  # a type_vocab_size table (BERT family)
    embed_norm: Flag = ALWAYS  # a LayerNorm on the summed embeddings
    qkv_bias: Flag = ALWAYS
    k_bias: bool = True  # False: Whisper's k_proj has no bias while q_proj and v_proj do
    o_bias: Flag = ALWAYS
    mlp_bias: Flag = ALWAYS
    norm_bias: Flag = ALWAYS  # every LayerNorm holds a bias (ModernBERT: norm_bias)
    final_norm: Flag = NEVER  # a LayerNorm after the last layer (pre-LN stacks)
    cross: Flag = ADD_CROSS  # idle cross-attention weights in every layer
    cross_width_key: str | None = None  # TrOCR: k/v of the cross-attention read cross_attention_hidden_size
    transform: bool = False  # a dense + LayerNorm LM-head transform on the sampled rows
    embedding_size_key: str | None = None  # a factorised token table of this width (ELECTRA, RoFormer)
    head_bias: Flag = ALWAYS
    # BERT's cls.predictions.bias is tied to decoder.bias with the table; untied (tie_word_embeddings false)
    # it is a second vocab-sized vector the forward never reads (BertLMPredictionHead.forward uses decoder)
    bias_tied: bool = False
    ties: bool = True  # the class declares tied weights (False: the head never shares the table)
    pooler: bool = False  # an idle hidden × hidden pooler (BigBird)
    bert_decoder: bool = True  # a BERT-style stack that is causal only with is_decoder (note when it is not)


# --- Group A: BERT-style stacks (`is_decoder=True`) -------------------------------------------------

# BERT (models/bert BertLMHeadModel): word, position and token-type tables, embeddings.LayerNorm;
# post-LN layers (attention.output.LayerNorm, output.LayerNorm) with biased query/key/value/dense and
# intermediate/output; cls.predictions.transform (dense + LayerNorm) and a tied decoder with its own
# bias; no pooler (BertModel(config, add_pooling_layer=False)). ERNIE is the same stack; Camembert,
# Data2VecText, RoBERTa and XLM-RoBERTa too (their lm_head.dense / layer_norm is the transform), with
# RoBERTa's position ids that start after the padding index.
BERT = EncoderStyle(transform=True, bias_tied=True)
ROBERTA = replace(BERT, positions_after_padding=True)
# BertGeneration (BertGenerationDecoder): no token-type table, no transform (lm_head: decoder + bias).
BERT_GENERATION = EncoderStyle(token_types=False, bias_tied=True)
# BigBird (BigBirdForCausalLM): BERT's stack with query/key/value biases from use_bias (BigBirdSelfAttention)
# and the pooler kept (BigBirdModel(config) adds it by default; its tanh(pooler(h[:, 0])) is computed but is
# not the logits: idle).
BIGBIRD = EncoderStyle(transform=True, pooler=True, bias_tied=True, qkv_bias=Flag("use_bias", True))
# Megatron-BERT: pre-LN layers (attention.ln, ln) and a final encoder.ln; no embedding LayerNorm.
MEGATRON_BERT = EncoderStyle(transform=True, embed_norm=NEVER, final_norm=ALWAYS, bias_tied=True)
# RoBERTa-PreLayerNorm: pre-LN layers with the embedding LayerNorm and a final LayerNorm.
ROBERTA_PRELN = replace(ROBERTA, final_norm=ALWAYS)
# XLM-RoBERTa-XL: pre-LN layers, a final encoder.LayerNorm, no embedding LayerNorm.
XLM_ROBERTA_XL = replace(ROBERTA, embed_norm=NEVER, final_norm=ALWAYS)
# ELECTRA (ElectraForCausalLM, the generator): tables and LayerNorm at embedding_size E, an
# embeddings_project (E → hidden, bias) when E differs; generator_predictions maps hidden → E (dense +
# bias, LayerNorm(E)); generator_lm_head (vocab × E, bias) tied to the table. RoFormer the same
# (RoFormerEmbeddings at embedding_size, which RoFormerConfig defaults to hidden_size), without a
# position table: its rotary sinusoid is a stored (max_position_embeddings × head_dim) parameter
# (RoFormerSinusoidalPositionalEmbedding, an nn.Embedding).
ELECTRA = EncoderStyle(transform=True, embedding_size_key="embedding_size")
ROFORMER = EncoderStyle(transform=True, embedding_size_key="embedding_size", positions_key=None, bias_tied=True)
# (ELECTRA's generator_lm_head keeps a single bias: no second vector when untied.)

# --- Group B: the decoder half of encoder–decoder models ---------------------------------------------

DECODER = EncoderStyle(layers_key="decoder_layers", heads_key="decoder_attention_heads", ffn_key="decoder_ffn_dim",
                       token_types=False, cross=ALWAYS, head_bias=NEVER, bert_decoder=False)
# BART (BartForCausalLM → BartDecoder): learned positions with 2 extra rows, layernorm_embedding, post-LN
# layers (self_attn_layer_norm, encoder_attn_layer_norm, final_layer_norm), biased projections and
# fc1/fc2, no final LayerNorm, an unbiased lm_head tied to embed_tokens. MVP and PLBart are the same
# decoder (MVP's prompt modules are refused, below).
BART = replace(DECODER, position_offset=2)
# mBART: BART's decoder, pre-LN, with a final layer_norm.
MBART = replace(DECODER, position_offset=2, final_norm=ALWAYS)
# Blenderbot-small: learned positions without an offset, layernorm_embedding, no final norm.
BLENDERBOT_SMALL = DECODER
# Blenderbot: learned positions without an offset, no embedding LayerNorm, a final layer_norm.
BLENDERBOT = replace(DECODER, embed_norm=NEVER, final_norm=ALWAYS)
# Marian: a sinusoidal position table stored as a parameter (MarianSinusoidalPositionalEmbedding is an
# nn.Embedding of max_position_embeddings rows), no embedding LayerNorm, no final norm; the decoder's
# token table has decoder_vocab_size rows (MarianDecoder.embed_tokens).
MARIAN = replace(DECODER, embed_norm=NEVER)
# Pegasus: Marian's stored sinusoidal table, no embedding LayerNorm, a final layer_norm.
PEGASUS = replace(DECODER, embed_norm=NEVER, final_norm=ALWAYS)
# BigBird-Pegasus (BigBirdPegasusForCausalLM): learned positions without an offset, layernorm_embedding,
# q/k/v/out biases (self and cross) from use_bias while fc1/fc2 always have one, no final norm; the class
# declares no tied weights, so its lm_head is its own matrix whatever tie_word_embeddings says. Its decoder
# attention is full (BigBirdPegasusDecoderAttention); block-sparse attention is the encoder's.
BIGBIRD_PEGASUS = replace(DECODER, qkv_bias=Flag("use_bias", False), o_bias=Flag("use_bias", False), ties=False)
# TrOCR (TrOCRForCausalLM): learned positions (+2 rows) when use_learned_position_embeddings, else a
# sinusoidal table computed at init (not stored); layernorm_embedding when `layernorm_embedding`; the
# cross-attention's k/v read cross_attention_hidden_size (TrOCRAttention kdim/vdim); no final norm.
TROCR = replace(DECODER, position_offset=2, positions=Flag("use_learned_position_embeddings", True),
                embed_norm=Flag("layernorm_embedding", True), cross_width_key="cross_attention_hidden_size")
# Whisper (WhisperForCausalLM → WhisperDecoder): learned positions of max_target_positions rows, no
# embedding LayerNorm, a final layer_norm; k_proj has no bias (WhisperAttention), q/v/out do.
WHISPER = replace(DECODER, positions_key="max_target_positions", embed_norm=NEVER, final_norm=ALWAYS, k_bias=False)
# MusicGen (MusicgenForCausalLM, MusicgenDecoderConfig's own keys): num_codebooks token tables of vocab + 1
# rows summed per token, a sinusoidal non-persistent position buffer (no parameters), unbiased attention
# (self and encoder_attn, always built) and fc1/fc2, a final layer_norm, num_codebooks unbiased lm_heads
# (vocab × hidden) never tied. MusicGen-Melody prepends its conditioning instead: no encoder_attn.
MUSICGEN = EncoderStyle(ffn_key="ffn_dim", positions_key=None, token_types=False, embed_norm=NEVER, qkv_bias=NEVER,
                        o_bias=NEVER, mlp_bias=NEVER, final_norm=ALWAYS, cross=ALWAYS, head_bias=NEVER, ties=False,
                        bert_decoder=False)
MUSICGEN_MELODY = replace(MUSICGEN, cross=NEVER)


def _linear(part: str, module: str, out_f: int, in_f: int, bias: bool, idle: bool = False) -> list[Weight]:
    ws = [Weight(part, module, M, (out_f, in_f), idle=idle)]
    if bias:
        ws.append(Weight(part, module, BIAS, (out_f,), idle=idle))
    return ws


def _norm(part: str, module: str, width: int, bias: bool, idle: bool = False) -> list[Weight]:
    ws = [Weight(part, module, NORM, (width,), idle=idle)]
    if bias:
        ws.append(Weight(part, module, BIAS, (width,), idle=idle))
    return ws


@dataclass(frozen=True)
class Extras:
    """What a family adds beyond its `EncoderStyle` (computed from the config by its builder)."""

    embed: tuple[Weight, ...] = ()
    ffn: tuple[Weight, ...] = ()  # per layer, in the FFN block (X-MOD's language adapters)
    notes: tuple[str, ...] = ()
    table_rows: int | None = None  # token-table rows when not vocab_size (Marian's decoder_vocab_size)
    codebooks: int = 1
    final_norm: bool | None = None  # None: the style's flag (X-MOD: pre_norm)
    window_layers: tuple[int | None, ...] | None = None  # per-layer sliding window (ModernBERT)
    first_attn_norm: bool = True  # False: layer 0 has no attention norm (ModernBERT's Identity)
    gated_mlp: bool = False
    table_width: int | None = None  # a factorised table's width (RemBERT's input_embedding_size)
    head_width: int | None = None  # the transform's and head's width (RemBERT's output_embedding_size)
    transform_bias: bool = True
    max_positions: int | None = None  # tokens a stored position table outside the style indexes (RoFormer)


def build_encoder_style(style: EncoderStyle, view: ConfigView, extras: Extras = Extras()) -> ModelSpec:
    hidden, vocab = view.req_int("hidden_size"), view.req_int("vocab_size")
    layers, heads = view.req_int(style.layers_key), view.req_int(style.heads_key)
    head_dim = view.head_dim(heads, hidden)
    if heads * head_dim != hidden:
        raise ConfigError(f"config.json ({view.arch}): {style.heads_key} {heads} × head_dim {head_dim} is not "
                          f"hidden_size {hidden}; fix the config")
    inter = view.req_int(style.ffn_key) if style.ffn_key else 4 * hidden
    norm_bias = style.norm_bias.read(view)
    qkv_bias, o_bias, mlp_bias = style.qkv_bias.read(view), style.o_bias.read(view), style.mlp_bias.read(view)
    width = extras.table_width
    if width is None and style.embedding_size_key:
        width = view.opt_int(style.embedding_size_key, hidden)
    head_width = extras.head_width or width or hidden

    embed: list[Weight] = []
    max_positions = extras.max_positions  # a stored table bounds the sequence (an index past it fails)
    if style.positions_key and style.positions.read(view):
        positions = view.req_int(style.positions_key)
        rows = positions + style.position_offset
        embed.append(Weight("embed", "embed_positions", EMB, (rows, width or hidden), quantizable=False))
        start = (view.opt_int("pad_token_id", 1, minimum=0) or 0) + 1 if style.positions_after_padding else 0
        max_positions = positions - start
    if style.token_types:
        types = view.req_int("type_vocab_size")
        embed.append(Weight("embed", "token_type_embeddings", EMB, (types, width or hidden), quantizable=False))
    embed += extras.embed
    if style.embed_norm.read(view):
        embed += _norm("embed", "embeddings.LayerNorm", width or hidden, norm_bias)
    if width is not None and (width != hidden or extras.table_width is not None):
        embed += _linear("embed", "embeddings_project", hidden, width, True)  # RemBERT maps even an equal width

    # Self-attention: multi-head (kv_heads = heads), KV per token 2 · hidden; Whisper's V bias without a K bias
    attn_extra: list[Weight] = []
    kv_bias = qkv_bias and style.k_bias
    if qkv_bias and not style.k_bias:
        attn_extra.append(Weight("qkv", "self_attn.v_proj", BIAS, (hidden,)))
    cross_params = 0
    if style.cross.read(view):
        kv_in = (view.opt_int(style.cross_width_key, hidden) if style.cross_width_key else hidden) or hidden
        cross = [*_linear("cross", "encoder_attn.q_proj", hidden, hidden, qkv_bias, idle=True),
                 *_linear("cross", "encoder_attn.k_proj", hidden, kv_in, kv_bias, idle=True),
                 *_linear("cross", "encoder_attn.v_proj", hidden, kv_in, qkv_bias, idle=True),
                 *_linear("cross", "encoder_attn.out_proj", hidden, hidden, o_bias, idle=True),
                 *_norm("cross", "encoder_attn_layer_norm", hidden, norm_bias, idle=True)]
        attn_extra += cross
        cross_params = sum(w.elements for w in cross) * layers
    ffn = DenseFfn(hidden=hidden, intermediate=inter, gated=extras.gated_mlp, bias=mlp_bias)
    windows = extras.window_layers or (None,) * layers
    stack = []
    for i in range(layers):
        attn = GqaAttention(hidden=hidden, heads=heads, kv_heads=heads, head_dim=head_dim, window=windows[i],
                            q_bias=qkv_bias, kv_bias=kv_bias, o_bias=o_bias,
                            block_norms=0 if i == 0 and not extras.first_attn_norm else 1)
        stack.append(LayerSpec(attn, ffn, attn_extras=tuple(attn_extra), ffn_extras=extras.ffn))

    head: list[Weight] = []
    if style.transform:
        head += _linear("head", "lm_head.transform.dense", head_width, hidden, extras.transform_bias)
        head += _norm("head", "lm_head.transform.LayerNorm", head_width, norm_bias)
    if style.pooler:
        head += _linear("head", "pooler", hidden, hidden, True, idle=True)
    spec_tie = view.opt_bool("tie_word_embeddings", True) and style.ties
    if style.bias_tied and not spec_tie:
        head.append(Weight("head", "lm_head.predictions.bias", BIAS, (vocab,), idle=True))

    notes = list(extras.notes)
    if cross_params:
        notes.append(f"{view.arch}: {cross_params:,} cross-attention parameters are counted but do no work (a "
                     "decoder-only forward has no encoder states: no reads, no FLOPs, no KV)")
    if style.bert_decoder and not view.opt_bool("is_decoder", False):
        notes.append(f"{view.arch}: is_decoder is not true, so transformers runs this stack bidirectionally without "
                     "a KV cache; the work shown is the causal decoder's (is_decoder=true)")
    final = style.final_norm.read(view) if extras.final_norm is None else extras.final_norm
    spec = finish(view, Frame(hidden, layers, heads, vocab), stack, True, tuple(notes), norm_bias=norm_bias)
    table_rows = extras.table_rows
    tie = spec.tie_embeddings and style.ties
    if tie and table_rows not in (None, vocab):
        raise ConfigError(f"config.json ({view.arch}): a tied head needs the decoder's token table to hold vocab_size "
                          f"{vocab} rows, not {table_rows}; untie it or fix decoder_vocab_size")
    return replace(
        spec, tie_embeddings=tie, embed_extras=tuple(embed), final_norm=final, head_bias=style.head_bias.read(view),
        head_extras=tuple(head), embed_rows=table_rows, table_width=width if width != hidden else None,
        head_width=head_width if head_width != hidden else None, codebooks=extras.codebooks,
        max_positions=max_positions,
    )


# --- Families with more than the shared traits ------------------------------------------------------


def build_ernie(view: ConfigView) -> ModelSpec:
    """ERNIE (models/ernie ErnieEmbeddings): BERT plus a task-type table when use_task_id."""
    embed: tuple[Weight, ...] = ()
    if view.opt_bool("use_task_id", False):
        shape = (view.req_int("task_type_vocab_size"), view.req_int("hidden_size"))
        embed = (Weight("embed", "task_type_embeddings", EMB, shape, quantizable=False),)
    return build_encoder_style(BERT, view, Extras(embed=embed))


def build_bigbird(view: ConfigView) -> ModelSpec:
    """BigBird: BERT's stack; block-sparse attention is bidirectional and keeps no KV cache."""
    notes: tuple[str, ...] = ()
    if view.opt_str("attention_type", "block_sparse") != "original_full":
        notes = (f"{view.arch}: attention_type is '{view.opt_str('attention_type', 'block_sparse')}'; transformers "
                 "uses full attention when the model decodes (add_cross_attention, or sequences of at most "
                 "(5 + 2 · num_random_blocks) · block_size tokens) and block-sparse bidirectional attention "
                 "otherwise; the work shown is the causal full-attention decoder's",)
    return build_encoder_style(BIGBIRD, view, Extras(notes=notes))


def build_roformer(view: ConfigView) -> ModelSpec:
    """RoFormer: its rotary sinusoid is stored, one (max_position_embeddings × head_dim) table for the stack
    (RoFormerEncoder.embed_positions, an nn.Embedding); one row per new token."""
    heads, hidden = view.req_int("num_attention_heads"), view.req_int("hidden_size")
    positions = view.req_int("max_position_embeddings")
    table = Weight("embed", "encoder.embed_positions", EMB, (positions, view.head_dim(heads, hidden)),
                   quantizable=False)
    return build_encoder_style(ROFORMER, view, Extras(embed=(table,), max_positions=positions))


def build_rembert(view: ConfigView) -> ModelSpec:
    """RemBERT: tables at input_embedding_size, embedding_hidden_mapping_in (always, biased) to hidden; the
    head maps hidden → output_embedding_size (dense + bias, LayerNorm) before an untied, biased decoder
    (RemBertLMPredictionHead); the class declares no tied weights."""
    return build_encoder_style(replace(BERT, ties=False, bias_tied=False), view, Extras(
        table_width=view.req_int("input_embedding_size"), head_width=view.req_int("output_embedding_size")))


def build_roc_bert(view: ConfigView) -> ModelSpec:
    """RoCBERT (RoCBertEmbeddings): shape and pronunciation tables beside the word table; with concat_input
    the three are concatenated and map_inputs_layer (biased) maps them back to hidden on every token."""
    hidden = view.req_int("hidden_size")
    pron = (view.req_int("pronunciation_vocab_size"), view.req_int("pronunciation_embed_dim"))
    shape = (view.req_int("shape_vocab_size"), view.req_int("shape_embed_dim"))
    embed = [Weight("embed", "pronunciation_embed", EMB, pron, quantizable=False),
             Weight("embed", "shape_embed", EMB, shape, quantizable=False)]
    if view.opt_bool("concat_input", True):
        width = hidden + (pron[1] if view.opt_bool("enable_pronunciation", True) else 0) \
            + (shape[1] if view.opt_bool("enable_shape", True) else 0)
        embed += _linear("embed", "map_inputs_layer", hidden, width, True)
    return build_encoder_style(BERT, view, Extras(embed=tuple(embed)))


def build_xmod(view: ConfigView) -> ModelSpec:
    """X-MOD (models/xmod XmodOutput): after each layer's MLP, one bottleneck adapter per language
    (dense1 hidden → hidden / adapter_reduction_factor, dense2 back, both biased) of which each sequence
    uses the one its lang_ids name; an adapter_layer_norm when set; pre_norm adds a final LayerNorm.
    The adapters are expressed as top-1 routed copies: all counted, one applied per token; their reads
    are priced like a routed expert's (uniform over tokens), an upper estimate when a batch holds one
    language."""
    hidden = view.req_int("hidden_size")
    languages = view.cfg.get("languages", view.defaults.get("languages"))
    if not isinstance(languages, list) or not languages:
        raise ConfigError(f"config.json ({view.arch}): languages must be a non-empty list of adapter languages")
    bottleneck = hidden // view.req_int("adapter_reduction_factor")
    n = len(languages)
    ffn = [Weight("adapter", "output.adapter_modules.dense1", M, (bottleneck, hidden), copies=n, top_k=1),
           Weight("adapter", "output.adapter_modules.dense1", BIAS, (bottleneck,), copies=n, top_k=1),
           Weight("adapter", "output.adapter_modules.dense2", M, (hidden, bottleneck), copies=n, top_k=1),
           Weight("adapter", "output.adapter_modules.dense2", BIAS, (hidden,), copies=n, top_k=1)]
    if view.opt_bool("adapter_layer_norm", False):
        ffn += _norm("adapter", "output.adapter_layer_norm", hidden, True)
    note = (f"{view.arch}: {n} language adapter(s) per layer; one applies per token (priced as a top-1 routed "
            "expert)",)
    return build_encoder_style(ROBERTA, view, Extras(ffn=tuple(ffn), notes=note,
                                                  final_norm=view.opt_bool("pre_norm", False)))


def build_xlm(view: ConfigView) -> ModelSpec:
    """XLM (XLMWithLMHeadModel → XLMModel): position table, language table when n_langs > 1 and
    use_lang_emb, layer_norm_emb; post-LN layers (layer_norm1/2), TransformerFFN of 4 × emb_dim, biased
    q/k/v/out_lin and lin1/lin2; pred_layer.proj (biased) tied to the table. XLMModel refuses
    is_encoder=false (NotImplementedError); an adaptive softmax head (asm) is not expressed."""
    if not view.opt_bool("is_encoder", True):
        raise ConfigError(f"config.json ({view.arch}): is_encoder is false, which transformers' XLMModel refuses "
                          "(\"XLM can only be used as an encoder\"); set it to true")
    if view.opt_bool("asm", False):
        raise ConfigError(f"config.json ({view.arch}): asm (an adaptive-softmax head) is not expressed by the "
                          "work accountant; only the linear pred_layer is")
    hidden = view.req_int("hidden_size")
    embed: tuple[Weight, ...] = ()
    langs = view.opt_int("n_langs", 1) or 1
    if langs > 1 and view.opt_bool("use_lang_emb", True):
        embed = (Weight("embed", "lang_embeddings", EMB, (langs, hidden), quantizable=False),)
    notes: tuple[str, ...] = ()
    if not view.opt_bool("causal", False):
        notes = (f"{view.arch}: causal is false, so transformers' XLM attends bidirectionally; the work shown is the "
                 "causal decoder's (causal=true)",)
    xlm = EncoderStyle(ffn_key=None, token_types=False, bert_decoder=False)
    return build_encoder_style(xlm, view, Extras(embed=embed, notes=notes))


def build_modernbert_decoder(view: ConfigView) -> ModelSpec:
    """ModernBERT-decoder (models/modernbert_decoder): rotary (no position table), embeddings.norm; pre-LN
    layers whose first has no attention norm (ModernBertDecoderLayer: nn.Identity at layer 0); q/k/v/Wo
    biases from attention_bias; a GLU MLP (Wi: hidden → 2 · intermediate, Wo) with mlp_bias; every LayerNorm
    biased by norm_bias; final_norm; lm_head dense (classifier_bias) + norm, then the tied decoder with
    decoder_bias. Layer types: `layer_types`, else full every global_attn_every_n_layers-th layer (3) from
    layer 0 and sliding otherwise, with window local_attention // 2 (ModernBertDecoderConfig.__post_init__)."""
    layers = view.req_int("num_hidden_layers")
    local = view.opt_int("local_attention", None)
    window = local // 2 if local else None
    types = view.layer_types(layers)
    if types is None:
        every = view.opt_int("global_attn_every_n_layers", 3)
        types = tuple("full_attention" if i % every == 0 else "sliding_attention" for i in range(layers))
    windows: list[int | None] = []
    for i, kind in enumerate(types):
        if kind not in ("full_attention", "sliding_attention"):
            raise ConfigError(f"config.json ({view.arch}): layer_types[{i}] '{kind}' is not full_attention or "
                              "sliding_attention")
        if kind == "sliding_attention" and window is None:
            raise ConfigError(f"config.json ({view.arch}): layer_types[{i}] is sliding_attention but "
                              "local_attention is unset; add local_attention")
        windows.append(window if kind == "sliding_attention" else None)
    bias, mlp = Flag("attention_bias", False), Flag("mlp_bias", False)
    style = EncoderStyle(positions_key=None, token_types=False, qkv_bias=bias, o_bias=bias, mlp_bias=mlp,
                         norm_bias=Flag("norm_bias", False), final_norm=ALWAYS, transform=True,
                         head_bias=Flag("decoder_bias", True), bert_decoder=False)
    return build_encoder_style(style, view, Extras(
        window_layers=tuple(windows), first_attn_norm=False, gated_mlp=True,
        transform_bias=view.opt_bool("classifier_bias", False)))


def build_marian(view: ConfigView) -> ModelSpec:
    """Marian: the decoder's token table has decoder_vocab_size rows (MarianConfig defaults it to vocab_size)."""
    rows = view.opt_int("decoder_vocab_size", None)
    return build_encoder_style(MARIAN, view, Extras(table_rows=rows))


def build_mvp(view: ConfigView) -> ModelSpec:
    """MVP: BART's decoder; use_prompt adds prefix-prompt modules that lengthen every layer's keys, which
    the accountant does not express."""
    if view.opt_bool("use_prompt", False):
        raise ConfigError(f"config.json ({view.arch}): use_prompt (MVP's layer-wise prefix prompts) is not expressed "
                          "by the work accountant; set it to false")
    return build_encoder_style(BART, view)


def build_musicgen(style: EncoderStyle, view: ConfigView) -> ModelSpec:
    codebooks = view.req_int("num_codebooks")
    return build_encoder_style(style, view, Extras(
        table_rows=view.req_int("vocab_size") + 1, codebooks=codebooks,
        notes=(f"{view.arch}: {codebooks} codebooks: {codebooks} token tables summed per token and {codebooks} LM "
               "heads on each sampled row",)))


# GitVisionConfig's keyword defaults (transformers 5.24 models/git/configuration_git.py): GitConfig's
# vision_config defaults to None, which GitConfig.__post_init__ replaces with GitVisionConfig()
_GIT_VISION = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "num_channels": 3,
               "image_size": 224, "patch_size": 16}
GIT = EncoderStyle(token_types=False, bert_decoder=False)


def build_git(view: ConfigView) -> ModelSpec:
    """GIT (GitForCausalLM): a BERT-style post-LN text stack (word and position tables, embeddings.LayerNorm,
    no token types) with a biased `output` head, beside a CLIP-style image encoder (GitVisionModel: class
    embedding, unbiased patch Conv2d, position table, pre/post LayerNorms, q/k/v/out and fc1/fc2 with biases,
    two LayerNorms a layer), GitProjection (Linear + LayerNorm) and, with num_image_with_embedding, one
    temporal vector per image. A text-only forward runs no image: the image side is `idle` here, and an
    image's num_patches + 1 tokens that GIT prepends to the sequence are the workload's to count."""
    stated = view.cfg.get("vision_config") or {}
    if not isinstance(stated, dict):
        raise ConfigError(f"config.json ({view.arch}): vision_config is not an object; fix the config")
    vision = _GIT_VISION | {k: stated[k] for k in _GIT_VISION if k in stated}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in vision.values()):
        raise ConfigError(f"config.json ({view.arch}): vision_config's sizes must be integers (a square image and "
                          "patch); fix the config")
    hv, iv, lv = vision["hidden_size"], vision["intermediate_size"], vision["num_hidden_layers"]
    patch, channels = vision["patch_size"], vision["num_channels"]
    positions = (vision["image_size"] // patch) ** 2 + 1
    hidden = view.req_int("hidden_size")
    image = [Weight("image", "image_encoder.class_embedding", WeightKind.VECTOR, (hv,), idle=True),
             Weight("image", "image_encoder.patch_embedding", M, (hv, channels * patch * patch), idle=True),
             Weight("image", "image_encoder.position_embedding", EMB, (positions, hv), idle=True),
             *_norm("image", "image_encoder.pre_layrnorm", hv, True, idle=True),
             *_norm("image", "image_encoder.post_layernorm", hv, True, idle=True),
             *_linear("image", "visual_projection.0", hidden, hv, True, idle=True),
             *_norm("image", "visual_projection.1", hidden, True, idle=True)]
    layer = [*_linear("image", "image_encoder.layers.q_proj", hv, hv, True, idle=True),
             *_linear("image", "image_encoder.layers.k_proj", hv, hv, True, idle=True),
             *_linear("image", "image_encoder.layers.v_proj", hv, hv, True, idle=True),
             *_linear("image", "image_encoder.layers.out_proj", hv, hv, True, idle=True),
             *_norm("image", "image_encoder.layers.layer_norm1", hv, True, idle=True),
             *_norm("image", "image_encoder.layers.layer_norm2", hv, True, idle=True),
             *_linear("image", "image_encoder.layers.fc1", iv, hv, True, idle=True),
             *_linear("image", "image_encoder.layers.fc2", hv, iv, True, idle=True)]
    image += [replace(w, copies=lv) for w in layer]
    temporal = view.opt_int("num_image_with_embedding", None)
    if temporal:
        image.append(Weight("image", "img_temporal_embedding", WeightKind.VECTOR, (hv,), copies=temporal, idle=True))
    idle = sum(w.elements for w in image)
    note = (f"{view.arch}: the image encoder and projection ({idle:,} parameters) are counted but idle: the work "
            f"shown is a text-only forward; each image adds {positions} tokens ahead of the text",)
    return build_encoder_style(GIT, view, Extras(embed=tuple(image), notes=note))


# MllamaTextConfig.__post_init__: cross_attention_layers None becomes these layer indices
_MLLAMA_CROSS_LAYERS = (3, 8, 13, 18, 23, 28, 33, 38)


def build_mllama_text(view: ConfigView) -> ModelSpec:
    """Mllama's text model (MllamaForCausalLM, models/mllama): Llama layers (GQA, no biases, RMSNorms, a gated
    SiLU MLP) except at `cross_attention_layers`, where a MllamaCrossAttentionDecoderLayer holds a
    cross-attention (q/k/v/o without biases, per-head q_norm/k_norm), its tanh gate, an MLP and its gate, two
    RMSNorms. Without image states MllamaTextModel skips those layers entirely (`continue` when
    cross_attention_states is None and their cache is empty): they are `idle` (no mixer, no FFN, no KV here).
    The token table has vocab_size + 8 rows; the class declares no tied weights."""
    frame = read_frame(view)
    kv_heads, head_dim = view.kv_heads(frame.heads), view.head_dim(frame.heads, frame.hidden)
    inter = view.req_int("intermediate_size")
    stated = view.cfg.get("cross_attention_layers")
    cross = _MLLAMA_CROSS_LAYERS if stated is None else stated
    if not isinstance(cross, (list, tuple)) or not all(isinstance(i, int) and 0 <= i < frame.layers for i in cross):
        raise ConfigError(f"config.json ({view.arch}): cross_attention_layers must list layer indices below "
                          f"num_hidden_layers {frame.layers}; fix the config")
    h, q, kv = frame.hidden, frame.heads * head_dim, kv_heads * head_dim
    attn_idle = (*_norm("cross", "input_layernorm", h, False, idle=True),
                 *_linear("cross", "cross_attn.q_proj", q, h, False, idle=True),
                 *_linear("cross", "cross_attn.k_proj", kv, h, False, idle=True),
                 *_linear("cross", "cross_attn.v_proj", kv, h, False, idle=True),
                 *_linear("cross", "cross_attn.o_proj", h, q, False, idle=True),
                 *_norm("cross", "cross_attn.q_norm", head_dim, False, idle=True),
                 *_norm("cross", "cross_attn.k_norm", head_dim, False, idle=True),
                 Weight("cross", "cross_attn_attn_gate", WeightKind.VECTOR, (1,), idle=True))
    ffn_idle = (*_norm("cross", "post_attention_layernorm", h, False, idle=True),
                *_linear("cross", "mlp.gate_proj", inter, h, False, idle=True),
                *_linear("cross", "mlp.up_proj", inter, h, False, idle=True),
                *_linear("cross", "mlp.down_proj", h, inter, False, idle=True),
                Weight("cross", "cross_attn_mlp_gate", WeightKind.VECTOR, (1,), idle=True))
    self_layer = LayerSpec(GqaAttention(hidden=h, heads=frame.heads, kv_heads=kv_heads, head_dim=head_dim),
                           DenseFfn(hidden=h, intermediate=inter))
    cross_layer = LayerSpec(NoAttention(hidden=h), NoFfn(hidden=h), attn_extras=attn_idle, ffn_extras=ffn_idle)
    layers = [cross_layer if i in cross else self_layer for i in range(frame.layers)]
    idle = len(set(cross)) * sum(w.elements for w in (*attn_idle, *ffn_idle))
    note = (f"{view.arch}: {len(set(cross))} cross-attention layers ({idle:,} parameters) are counted but skipped: "
            "a text-only forward runs them not at all (MllamaTextModel); with an image they attend to its states",)
    spec = finish(view, frame, layers, False, note)
    return replace(spec, tie_embeddings=False, embed_rows=frame.vocab + 8)


def _style(style: EncoderStyle):
    return partial(build_encoder_style, style)


ARCHITECTURES = {
    # Group A
    "BertLMHeadModel": _style(BERT),
    "BertGenerationDecoder": _style(BERT_GENERATION),
    "BigBirdForCausalLM": build_bigbird,
    "CamembertForCausalLM": _style(ROBERTA),
    "Data2VecTextForCausalLM": _style(ROBERTA),
    "ElectraForCausalLM": _style(ELECTRA),
    "ErnieForCausalLM": build_ernie,
    "MegatronBertForCausalLM": _style(MEGATRON_BERT),
    "RemBertForCausalLM": build_rembert,
    "RoCBertForCausalLM": build_roc_bert,
    "RoFormerForCausalLM": build_roformer,
    "RobertaForCausalLM": _style(ROBERTA),
    "RobertaPreLayerNormForCausalLM": _style(ROBERTA_PRELN),
    "XLMRobertaForCausalLM": _style(ROBERTA),
    "XLMRobertaXLForCausalLM": _style(XLM_ROBERTA_XL),
    "XmodForCausalLM": build_xmod,
    "XLMWithLMHeadModel": build_xlm,
    "ModernBertDecoderForCausalLM": build_modernbert_decoder,
    # Group B
    "BartForCausalLM": _style(BART),
    "BigBirdPegasusForCausalLM": _style(BIGBIRD_PEGASUS),
    "BlenderbotForCausalLM": _style(BLENDERBOT),
    "BlenderbotSmallForCausalLM": _style(BLENDERBOT_SMALL),
    "MBartForCausalLM": _style(MBART),
    "MarianForCausalLM": build_marian,
    "MvpForCausalLM": build_mvp,
    "PLBartForCausalLM": _style(BART),
    "PegasusForCausalLM": _style(PEGASUS),
    "TrOCRForCausalLM": _style(TROCR),
    "WhisperForCausalLM": _style(WHISPER),
    "MusicgenForCausalLM": partial(build_musicgen, MUSICGEN),
    "MusicgenMelodyForCausalLM": partial(build_musicgen, MUSICGEN_MELODY),
    "GitForCausalLM": build_git,
    "MllamaForCausalLM": build_mllama_text,
}
