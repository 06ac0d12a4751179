"""tp{size=t}: Megatron-style tensor parallelism on a fused kernel graph (one rank's view).

Sharding is propagated along the data flow, so no layer names are needed:
- a GEMM reading replicated activations is column-parallel (n/t, output sharded), unless it is a
  router or a per-token scalar gate, or its output is normalised as one whole vector (an MLA
  latent): those stay replicated, as vLLM's ReplicatedLinear;
- a GEMM reading sharded activations is row-parallel (k/t) and is followed by an all-reduce;
- attention splits heads; KV heads split while t ≤ num_kv_heads and are replicated (and counted)
  beyond; MLA keeps its latent whole on every rank; linear attention splits its heads;
- MoE experts split their intermediate size and all-reduce their output; where the routed experts'
  output is added to a shared-expert MLP's (a row-parallel GEMM, optionally scaled per token by a
  replicated gate), both partial sums are added first and all-reduced once after the add, as vLLM
  does (vllm-project/vllm@002d6073, models/deepseek_v2.py DeepseekV2MoE.__init__ and
  models/qwen3_next.py Qwen3NextSparseMoeBlock.__init__: the shared MLP is built with
  reduce_results=False and handed to the FusedMoE layer as `shared_experts`, which adds it to the
  routed output and reduces the sum once);
- the embedding is vocab-parallel (all-reduce), the LM head vocab-parallel (all-gather);
- per-token kernels (norms, rotary, activations, elementwise) follow their input's sharding.
A split that does not divide raises an error naming the dimension.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from graphsim.ir import DType, Graph, Node, TensorSpec, split_value, unique_name
from graphsim.ir.geometry import (
    AttentionGeometry, Conv1dGeometry, ElementwiseGeometry, EmbeddingGeometry, GemmGeometry, Geometry,
    LinearAttentionGeometry, MoeExpertsGeometry, NormGeometry, RotaryGeometry,
)
from graphsim.ir.kernel import KernelAttrs, KernelKind, Rows
from graphsim.passes.base import PassError, PassResult, register_pass
from graphsim.passes.partition import gather, mamba_groups, packed_parts, replicated
from graphsim.passes.partition.conservation import Declared, check_conservation
from graphsim.passes.partition.sharding import PartitionPass, collective, split
from graphsim.vllm_checks import attention_heads_refusal

PER_TOKEN = {KernelKind.RMS_NORM, KernelKind.LAYER_NORM, KernelKind.ACT_AND_MUL, KernelKind.ACTIVATION,
             KernelKind.ELEMENTWISE, KernelKind.KV_CACHE_WRITE}


def _shard_dim(spec: TensorSpec, dim: int, t: int, what: str, where: str) -> TensorSpec:
    shape = list(spec.shape)
    d = shape[dim]
    if isinstance(d, int):
        shape[dim] = split(d, t, what, where)
    return TensorSpec(tuple(shape), spec.dtype)


@register_pass("tp")
@dataclass(frozen=True)
class TensorParallel(PartitionPass):
    def run(self, graph: Graph) -> PassResult:
        self.require_fused(graph)
        if graph.meta.tp != 1:
            raise PassError("tp was already applied to this graph")
        _check_attention_heads(graph, self.size)
        users: dict[str, list[Node]] = {}
        for n in graph.nodes:
            for v in n.inputs:
                users.setdefault(v, []).append(n)
        gathered = replicated.lora_downs(graph, users)  # gather_output=True by vLLM's own choice (replicated.py)
        while True:  # column-parallel GEMMs whose slice meets a replicated copy are gathered (gather.py)
            res, mixed = self._run(graph, gathered)
            if mixed <= gathered:
                return res
            gathered |= mixed

    def _run(self, graph: Graph, gathered: frozenset[str]) -> tuple[PassResult, frozenset[str]]:
        t = self.size
        out = graph.copy([])
        out.meta.tp = t
        if t == 1:
            out.nodes = list(graph.nodes)
            return PassResult(out, False, {}), frozenset()
        stats: dict[str, int] = {}
        users: dict[str, list[Node]] = {}
        for n in graph.nodes:
            for v in n.inputs:
                users.setdefault(v, []).append(n)
        sharded: set[str] = set()
        origins: dict[str, frozenset[str]] = {}  # a sharded value -> the column-parallel GEMMs it comes from
        # k / v outputs of a QKV GEMM that keeps whole KV heads (num_kv_heads < tp), a packed GEMM's whole parts
        kv_whole: set[str] = set()
        mixed: frozenset[str] = frozenset()
        producers = {n.name for n in graph.nodes}
        rename: dict[str, str] = {}
        used = {n.name for n in graph.nodes}
        params = dict(graph.params)
        deferred, sum_then_reduce = _shared_expert_sums(graph, users)
        latent, latent_deferred, latent_adds = _latent_moe_projections(graph, users)
        deferred, sum_then_reduce = deferred | latent_deferred, sum_then_reduce | latent_adds
        partial: set[str] = set()  # values that are per-rank partial sums awaiting one all-reduce
        whole_norms: dict[str, int] = {}  # producer -> whole-vector norms reading it
        for n in graph.nodes:
            group = _variance_group(n, n.attrs, graph)
            if group is not None:
                whole_norms[group] = whole_norms.get(group, 0) + 1
        variance_reduced: set[str] = set()
        declared = Declared()
        groups = mamba_groups.plan(graph, users, t)  # Mamba2 mixers with fewer B/C groups than ranks
        whole_proj = replicated.residual_projections(graph, users)  # vLLM ReplicatedLinear (replicated.py)

        def bump(key: str) -> None:
            stats[key] = stats.get(key, 0) + 1

        for original in graph.nodes:
            n = original.with_(inputs=tuple(rename.get(v, v) for v in original.inputs))
            a = n.kernel
            acts = [v for v in n.inputs if v not in graph.params]
            in_sharded = any(v in sharded for v in acts)
            in_partial = any(v in partial for v in acts)
            where = f"tp{{size={t}}} at {n.name}"
            after: Node | None = None
            out_sharded = False
            if a.kind is KernelKind.GEMM and n.name in latent:
                # a latent MoE's projection into / out of the experts' width: whole on every rank (vLLM
                # ReplicatedLinear); out of it, the routed partial sums stay partial (a linear map of each)
                declared.replicated.add(n.name)
                bump("replicated")
                if in_partial:
                    partial.update(_values(n))
            elif n.name in whole_proj and not in_sharded and not in_partial:
                # a projection of a reduced block output added straight into the residual stream: whole on every
                # rank (vLLM ReplicatedLinear, e.g. Zamba2HybridLayer.linear; graphsim/passes/partition/replicated.py)
                declared.replicated.add(n.name)
                bump("replicated")
            elif n.name in groups.extra:
                # a Mamba2 in_proj / conv1d (or a per-token multiplier between them) that holds the one B/C
                # group every rank replicates (vLLM MambaMixer2, n_groups == 1): column-parallel over
                # (width + 2·(tp − 1)·state) (graphsim/passes/partition/mamba_groups.py)
                if in_sharded == (a.kind is KernelKind.GEMM):
                    raise PassError(f"{where}: a Mamba2 {a.kind.value} with replicated groups reads "
                                    f"{'sharded' if in_sharded else 'replicated'} activations; report it with "
                                    "the model's config")
                n = mamba_groups.grow(n, graph, params, groups, t, where)
                declared.grown[n.name] = (groups.factor(n.name), mamba_groups.REASON)
                bump("mamba_groups_replicated")
                out_sharded = True
            elif (a.kind is KernelKind.GEMM and not in_sharded and not in_partial and n.name not in gathered
                  and (parts := packed_parts.whole_parts(n, _values(n), lambda p: _stays_replicated(p, users)
                                                         or _kda_low_rank_down(p, users, graph)))):
                # a packed GEMM with a part every rank keeps whole beside split ones (vLLM's Kimi in_proj_qkvgfab:
                # graphsim/passes/partition/packed_parts.py): one GEMM of the split parts' slices and the whole parts
                n, factor = packed_parts.split_parts(n, parts, graph, params, t, where)
                declared.grown[n.name] = (factor, packed_parts.REASON)
                kv_whole.update(v for v, _ in parts)  # those outputs are whole on every rank, not a slice
                origins.update((v, frozenset({n.name})) for v in _values(n) if v not in kv_whole)
                bump("column_parallel")
                bump("packed_whole_part")
                out_sharded = True
            elif a.kind is KernelKind.GEMM:
                n, after, out_sharded = self._gemm(n, a, in_sharded, users, graph, params, where, used, bump)
                if (a.rows is Rows.SEQUENCES or a.name == "lm_head") and a.geometry_as(GemmGeometry).n % t:
                    whole = a.geometry_as(GemmGeometry).n
                    declared.grown[n.name] = (n.kernel.geometry_as(GemmGeometry).n * t / whole, VOCAB_PADDED)
                if out_sharded and after is None and n.name in gathered:
                    # vLLM's ColumnParallelLinear(gather_output=True): the split GEMM, then an all-gather
                    after, out_sharded = self._reduce(n, KernelKind.ALL_GATHER, a.geometry_as(GemmGeometry).n,
                                                    "column_gather", used), False
                    bump("all_gather")
                elif out_sharded and not in_sharded:
                    origins.update((v, frozenset({n.name})) for v in _values(n))
                if not in_sharded and not out_sharded and after is None:
                    declared.replicated.add(n.name)
                qg = a.geometry_as(GemmGeometry)
                if out_sharded and qg.num_kv_heads is not None and qg.num_kv_heads < t:
                    declared.partial.add(n.name)  # whole KV heads on every rank (QKVParallelLinear)
                    # its k and v outputs are those whole heads, not a slice: a k / v norm on them runs whole on
                    # every rank, with no variance all-reduce (vLLM's k_norm on the rank's replicated KV head)
                    kv_whole.update(_values(n)[1:])
                if in_sharded and a.rows is not Rows.SEQUENCES and qg.bias:
                    # vLLM's RowParallelLinear keeps the whole bias on every rank and adds it on rank 0 only
                    # (model_executor/layers/linear.py RowParallelLinear: bias of output_size; forward:
                    # bias_ = None if self.tp_rank > 0 else self.bias): weights split, the bias whole
                    declared.row_bias.add(n.name)
                if after is not None and n.name in deferred and in_sharded:
                    after = None  # a shared expert's row-parallel output: reduced after the routed sum
                    partial.update(_values(n))
                    stats["all_reduce"] -= 1
                    bump("shared_reduce_deferred")
            elif a.kind is KernelKind.ATTENTION:
                n = n.with_(attrs=_attention(a, t, where, bump))
                heads = a.geometry_as(AttentionGeometry).num_heads
                for v in n.inputs:  # per-head parameters (attention sinks: models/gpt_oss.py OAIAttention
                    spec = graph.params.get(v)  # holds num_attention_heads // tp_size of them)
                    if spec is not None and spec.shape and spec.shape[0] == heads:
                        params[v] = _shard_dim(spec, 0, t, "per-head parameter", where)
                out_sharded = True
            elif a.kind is KernelKind.ROTARY:
                rg = a.geometry_as(RotaryGeometry)
                heads = split(rg.num_heads, t, "num_heads", where)
                kv = rg.num_kv_heads
                kv_rank = kv if kv == 1 else (split(kv, t, "num_kv_heads", where) if kv >= t else 1)
                if kv < t:
                    declared.partial.add(n.name)  # rotary on the replicated KV heads
                n = n.with_(attrs=a.with_geometry(replace(rg, num_heads=heads, num_kv_heads=kv_rank)))
                out_sharded = True
            elif a.kind is KernelKind.LINEAR_ATTENTION:
                lg = a.geometry_as(LinearAttentionGeometry)
                if n.name in groups.scans:  # Mamba2's one group, padded to one per rank (mamba_groups.py)
                    lg = replace(lg, num_k_heads=groups.scans[n.name] * t)
                # Mamba-1's B and C come whole to every rank from x_proj's all-reduce (mamba_mixer.py MambaMixer:
                # x_proj is a RowParallelLinear): its one group is not split
                k_heads = lg.num_k_heads if lg.kind == "mamba1" else split(lg.num_k_heads, t, "num_k_heads", where)
                v_heads = split(lg.num_v_heads, t, "num_v_heads", where)
                n = n.with_(attrs=a.with_geometry(replace(lg, num_k_heads=k_heads, num_v_heads=v_heads)))
                for v in n.inputs:  # per-head parameters (Mamba2's D and dt_bias: mamba_mixer2.py MambaMixer2
                    spec = graph.params.get(v)  # loads them with sharded_weight_loader(0), num_heads // tp each;
                    # Mamba-1's A [channels, state], D and the dt bias: mamba_mixer.py weight_loader, split on dim 0)
                    if spec is not None and len(spec.shape) in (1, 2) and spec.shape[0] == lg.num_v_heads:
                        params[v] = _shard_dim(spec, 0, t, "per-head parameter", where)
                out_sharded = True
            elif a.kind is KernelKind.MOE_EXPERTS:
                mg = a.geometry_as(MoeExpertsGeometry)
                inter = mg.inter_size
                split(inter, t, "moe intermediate_size", where)
                n = n.with_(attrs=a.with_geometry(replace(mg, tp=t)))
                for v in n.inputs:
                    if v in graph.params and len(graph.params[v].shape) == 3:
                        spec = graph.params[v]
                        dims = [i for i, d in enumerate(spec.shape) if d in (inter, 2 * inter) and i > 0]
                        if dims:
                            params[v] = _shard_dim(spec, dims[0], t, "moe intermediate_size", where)
                    elif v in graph.params and len(graph.params[v].shape) == 2:
                        # per-expert biases (GPT-OSS): the gate/up bias [E, 2·inter] splits with the intermediate
                        # features; the down bias [E, hidden] is whole on every rank and added on rank 0 only, as a
                        # row-parallel bias (vllm-project/vllm models/gpt_oss.py load_weights: w13_bias narrowed to
                        # the rank's 2·inter slice, w2_bias "only load on rank 0 to avoid duplication")
                        spec = graph.params[v]
                        if spec.shape[1] == mg.hidden_size:
                            declared.row_bias.add(n.name)
                        elif spec.shape[1] in (inter, 2 * inter):
                            params[v] = _shard_dim(spec, 1, t, "moe intermediate_size", where)
                if n.name in deferred:
                    partial.update(_values(n))
                    bump("moe_reduce_deferred")
                else:
                    after = self._reduce(n, KernelKind.ALL_REDUCE, int(n.outputs[0].shape[-1]), "moe_experts", used)
                    bump("all_reduce")
            elif in_partial and n.name in sum_then_reduce:
                # routed + shared partial sums added on every rank, then reduced once
                after = self._reduce(n, KernelKind.ALL_REDUCE, int(n.outputs[0].shape[-1]), "moe_shared_sum", used)
                bump("all_reduce")
            elif in_partial:  # a per-token scaling of a partial sum (a shared-expert gate) stays partial
                partial.update(_values(n))
            elif a.kind is KernelKind.EMBEDDING:
                eg = a.geometry_as(EmbeddingGeometry)
                vocab = _vocab_rank(eg.vocab, t, where)
                n = n.with_(attrs=a.with_geometry(replace(eg, vocab=vocab)))
                if vocab * t != eg.vocab:
                    declared.grown[n.name] = (vocab * t / eg.vocab, VOCAB_PADDED)
                for v in n.inputs:
                    if v in graph.params:
                        params[v] = _vocab_shard(graph.params[v], t, where)
                after = self._reduce(n, KernelKind.ALL_REDUCE, eg.width, "vocab_parallel_embedding", used)
                bump("all_reduce")
            elif a.kind is KernelKind.CONV1D and in_sharded:
                cg = a.geometry_as(Conv1dGeometry)
                n = n.with_(attrs=a.with_geometry(replace(cg, channels=split(cg.channels, t, "conv channels", where))))
                _shard_channel_params(n, graph, params, t, where)
                out_sharded = True
            elif a.kind is KernelKind.ELEMENTWISE and _mamba1_channel_operand(n, users, graph):
                # Mamba-1's D.float() and dt_proj.bias.float() (mamba_mixer.py MambaMixer.forward_cuda): casts of
                # the rank's channels of a per-channel parameter (its weight_loader splits dim 0)
                eg = a.geometry_as(ElementwiseGeometry)
                n = n.with_(attrs=a.with_geometry(replace(eg, width=split(eg.width, t, "mamba1 channels", where))))
                for v in n.inputs:
                    params[v] = _shard_dim(graph.params[v], 0, t, "per-channel parameter", where)
                out_sharded = True
            elif in_sharded and (a.kind in PER_TOKEN or a.kind is KernelKind.FUSED_ADD_RMS_NORM):
                if a.kind is KernelKind.ELEMENTWISE:  # (a residual norm fed so stays the check's refusal)
                    mixed |= gather.mixed_origins(original, graph, producers, sharded, origins, rename)
                if a.kind is KernelKind.ELEMENTWISE and any(v % t for v in _per_token_dims(a.geometry)):
                    # a leftover op on a small per-token value (a top-k score, a reduced sum): every
                    # rank computes it whole
                    bump("elementwise_replicated")
                else:
                    n = n.with_(attrs=a.with_geometry(_split_per_token(a.geometry, t, where)))
                    _shard_channel_params(n, graph, params, t, where)
                    out_sharded = True
                    group = _variance_group(n, a, graph)
                    if n.name in groups.norms:  # the gated norm over a one-group Mamba2 mixer's whole vector
                        group = n.name
                    if group is not None and group not in variance_reduced:
                        # a norm over a vector now spread over the ranks: each rank's sum of squares
                        # is all-reduced (f32, one value per normalised vector per token; the q and k
                        # norms of one projection share one all-reduce), as vLLM's
                        # MiniMaxText01RMSNormTP.forward_qk (layers/mamba/linear_attn.py) does
                        variance_reduced.add(group)
                        width = whole_norms.get(group, 1)
                        after = collective(unique_name(f"{n.name}.all_reduce", used), KernelKind.ALL_REDUCE,
                                           n.name, TensorSpec(n.outputs[0].shape, DType.FLOAT32), n, t, width,
                                           Rows.TOKENS, "norm_variance", "tp")
                        bump("all_reduce")
                        bump("norm_variance_reduce")
            out.nodes.append(n)
            if out_sharded:
                sharded.update(v for v in _values(n) if v not in kv_whole)
                if a.kind is not KernelKind.GEMM:  # a per-token kernel carries its inputs' origins
                    came = frozenset(g for v in n.inputs for g in origins.get(v, ()))
                    origins.update((v, came) for v in _values(n))
            if after is not None:
                out.nodes.append(after)
                rename[n.name] = after.name
                if out_sharded:  # a norm's variance all-reduce: its output is still the rank's slice
                    sharded.update(_values(after))
                    origins.update((v, origins.get(n.name, frozenset())) for v in _values(after))
        out.params = params
        out.outputs = [rename.get(o, o) for o in graph.outputs]
        if mixed - gathered:  # the caller runs again with these gathered: no check on this draft
            return PassResult(out, True, stats), mixed
        notes = check_conservation(graph, out, t, "tp", declared)
        return PassResult(out, True, stats, notes), mixed

    def _reduce(self, n: Node, kind: KernelKind, width: int, reason: str, used: set[str],
                rows: Rows = Rows.TOKENS) -> Node:
        name = unique_name(f"{n.name}.{kind.value}", used)
        return collective(name, kind, n.name, n.outputs[0], n, self.size, width, rows, reason, "tp")

    def _gemm(self, n: Node, a: KernelAttrs, in_sharded: bool, users, graph: Graph, params, where: str,
              used: set[str], bump):
        t = self.size
        g = a.geometry_as(GemmGeometry)
        nn, kk = g.n, g.k
        weights = [v for v in n.inputs if v in graph.params and len(graph.params[v].shape) == 2]
        biases = [v for v in n.inputs if v in graph.params and len(graph.params[v].shape) == 1]

        def out_dim(w: str) -> int:  # a weight stored [in, out] (transformers' Conv1D: GPT-2's c_attn / c_fc /
            shape = graph.params[w].shape  # c_proj; vLLM loads it transposed, gpt2.py load_weights) splits dim 1
            return 1 if shape[0] == kk and shape[1] == nn and kk != nn else 0
        if a.rows is Rows.SEQUENCES or a.name == "lm_head":
            n = n.with_(attrs=a.with_geometry(replace(g, n=_vocab_rank(nn, t, where))))
            for w in weights:
                params[w] = _vocab_shard(graph.params[w], t, where)
            for b in biases:  # ParallelLMHead's bias is vocab-sharded too (vocab_parallel_embedding.py ParallelLMHead)
                params[b] = _vocab_shard(graph.params[b], t, where)
            bump("vocab_parallel")
            bump("all_gather")
            return n, self._reduce(n, KernelKind.ALL_GATHER, nn, "lm_head_logits", used, a.rows), False
        if in_sharded and g.groups > 1:
            # a block-diagonal projection over head groups: each rank keeps its heads' groups whole (vLLM's
            # DeepseekV4 wo_a: n_local_groups = o_groups // tp, models/deepseek_v4 attention), no reduction
            groups = split(g.groups, t, "groups (block-diagonal projection)", where)
            n = n.with_(attrs=a.with_geometry(replace(g, n=nn // t, groups=groups)))
            for w in weights:
                params[w] = _shard_dim(graph.params[w], 0, t, "out_features (whole groups)", where)
            bump("group_parallel")
            return n, None, True
        if in_sharded:
            n = n.with_(attrs=a.with_geometry(replace(g, k=split(kk, t, "k (row-parallel input features)", where))))
            for w in weights:
                params[w] = _shard_dim(graph.params[w], 1 - out_dim(w), t, "in_features", where)
            bump("row_parallel")
            bump("all_reduce")
            return n, self._reduce(n, KernelKind.ALL_REDUCE, nn, "row_parallel", used), False
        if _stays_replicated(n, users) or _kda_low_rank_down(n, users, graph):
            bump("replicated")
            return n, None, False
        # fused QKV: q split by heads, whole KV heads per rank
        if g.q_features is not None and g.num_kv_heads is not None:
            q, kv = g.q_features, g.num_kv_heads
            kv_rank = split(kv, t, "num_key_value_heads", where) if kv >= t else 1
            n_rank = split(q, t, "q features", where) + (nn - q) * kv_rank // kv
            n = n.with_(attrs=a.with_geometry(replace(g, n=n_rank, q_features=q // t, num_kv_heads=kv_rank)))
            for w in weights + biases:
                spec = graph.params[w]
                d = out_dim(w) if w in weights else 0
                rows = int(spec.shape[d])
                shape = list(spec.shape)
                # one fused q|k|v weight (GPT-2 / GPT-BigCode c_attn, BLOOM query_key_value) keeps n_rank rows
                shape[d] = rows // t if rows == q else n_rank if rows == nn else rows * kv_rank // kv
                params[w] = TensorSpec(tuple(shape), spec.dtype)
            bump("column_parallel")
            return n, None, True
        n = n.with_(attrs=a.with_geometry(replace(g, n=split(nn, t, "n (column-parallel output features)", where))))
        for w in weights:
            params[w] = _shard_dim(graph.params[w], out_dim(w), t, "out_features", where)
        for b in biases:
            params[b] = _shard_dim(graph.params[b], 0, t, "out_features", where)
        bump("column_parallel")
        return n, None, True


# vLLM pads a vocabulary to a multiple of 64 before splitting it over the ranks (model_executor/layers/
# vocab_parallel_embedding.py: DEFAULT_VOCAB_PADDING_SIZE = 64, pad_vocab_size; VocabParallelEmbedding.__init__:
# num_embeddings_per_partition = divide(num_embeddings_padded, tp_size); ParallelLMHead likewise). graphsim pads only a
# vocabulary the tp size does not divide (it refused those; elsewhere vLLM's padding is under 64 rows a rank).
VOCAB_PADDING = 64
VOCAB_PADDED = "vocabulary padded to a multiple of 64 (VocabParallelEmbedding)"


def _vocab_rank(vocab: int, t: int, where: str) -> int:
    if vocab % t == 0:
        return vocab // t
    return split(-(-vocab // VOCAB_PADDING) * VOCAB_PADDING, t, "vocab_size padded to a multiple of 64", where)


def _vocab_shard(spec: TensorSpec, t: int, where: str) -> TensorSpec:
    """A vocabulary table's (or bias's) rows on one rank: dim 0 split, padded as vLLM pads it."""
    rows = spec.shape[0]
    if not isinstance(rows, int):
        return spec
    return TensorSpec((_vocab_rank(rows, t, where), *spec.shape[1:]), spec.dtype)


def _check_attention_heads(graph: Graph, t: int) -> None:
    """vLLM refuses a tp size that does not divide the attention heads before it builds the model (config/model.py
    ModelConfig.verify_with_parallel_config: "Total number of attention heads (...) must be divisible by tensor
    parallel size (...)"): the same refusal, naming vLLM's check, rather than a split error at the first kernel."""
    for n in graph.nodes:
        if isinstance(n.attrs, KernelAttrs) and n.attrs.kind is KernelKind.ATTENTION:
            refusal = attention_heads_refusal(n.attrs.geometry_as(AttentionGeometry).num_heads, t)
            if refusal:  # kv and simulate say the same (kv_layout.py)
                raise PassError(refusal)


def _shared_expert_sums(graph: Graph, users: dict[str, list[Node]]) -> tuple[set[str], set[str]]:
    """The MoE blocks whose routed and shared expert outputs are summed before one all-reduce: an
    `add` of a MoE experts output and a GEMM output (directly, or through one elementwise `mul`
    by a per-token gate), each used only on that path. Returns (the experts and GEMM nodes whose
    reduce moves after the sum, the add nodes the one all-reduce follows)."""
    producer = {v: n for n in graph.nodes for v in _values(n)}

    def sole_user(n: Node) -> Node | None:
        us = [u for v in _values(n) for u in users.get(v, [])]
        return us[0] if len(us) == 1 else None

    deferred: set[str] = set()
    adds: set[str] = set()
    for n in graph.nodes:
        a = n.attrs
        if not (isinstance(a, KernelAttrs) and a.kind is KernelKind.ELEMENTWISE and a.name == "add"):
            continue
        srcs = [producer[v] for v in n.inputs if v in producer]
        if len(srcs) != 2 or len(n.inputs) != 2:
            continue
        experts = [m for m in srcs if m.kernel.kind is KernelKind.MOE_EXPERTS]
        others = [m for m in srcs if m not in experts]
        if len(experts) != 1 or len(others) != 1 or sole_user(experts[0]) is not n:
            continue
        shared = others[0]
        if shared.kernel.kind is KernelKind.ELEMENTWISE and shared.kernel.name == "mul":  # a gated shared expert
            width = n.kernel.geometry_as(ElementwiseGeometry).width
            gemms = [m for m in _inputs_of(shared, producer) if m.kernel.kind is KernelKind.GEMM
                     and m.kernel.geometry_as(GemmGeometry).n == width and sole_user(m) is shared]
            if len(gemms) != 1 or sole_user(shared) is not n:
                continue
            shared = gemms[0]
        elif sole_user(shared) is not n:
            continue
        if shared.kernel.kind is not KernelKind.GEMM:
            continue
        deferred.update((experts[0].name, shared.name))
        adds.add(n.name)
    return deferred, adds


def _latent_moe_projections(graph: Graph, users: dict[str, list[Node]]) -> tuple[set[str], set[str], set[str]]:
    """A latent MoE (models/nemotron_h.py NemotronHMoE with moe_latent_size, vLLM 0.24): `fc1_latent_proj` maps
    the hidden state into the experts' width and `fc2_latent_proj` maps their combined output back, both
    ReplicatedLinear; the experts are built with reduce_results=False and the shared expert's output is added
    after fc2, then all-reduced once (`maybe_all_reduce_tensor_model_parallel`). Found as the GEMM whose output
    an experts kernel reads as its hidden input, and the GEMM that is the experts' sole user and whose sole
    user is an `add` with a GEMM (the shared expert's down projection) used only there. Returns (the latent
    GEMMs, the experts and shared GEMMs whose reduce moves after the add, those adds)."""
    producer = {v: n for n in graph.nodes for v in _values(n)}

    def sole_user(n: Node) -> Node | None:
        us = [u for v in _values(n) for u in users.get(v, [])]
        return us[0] if len(us) == 1 else None

    latent: set[str] = set()
    deferred: set[str] = set()
    adds: set[str] = set()
    for e in graph.nodes:
        if not (isinstance(e.attrs, KernelAttrs) and e.attrs.kind is KernelKind.MOE_EXPERTS):
            continue
        fc1 = producer.get(e.inputs[0]) if e.inputs else None
        fc2 = sole_user(e)
        if not (fc1 is not None and fc1.kernel.kind is KernelKind.GEMM and fc2 is not None
                and isinstance(fc2.attrs, KernelAttrs) and fc2.attrs.kind is KernelKind.GEMM):
            continue
        add = sole_user(fc2)
        if add is None or add.kernel.kind is not KernelKind.ELEMENTWISE or add.kernel.name != "add":
            continue
        shared = [m for m in _inputs_of(add, producer) if m is not fc2]
        if len(shared) != 1 or shared[0].kernel.kind is not KernelKind.GEMM or sole_user(shared[0]) is not add:
            continue
        latent.update((fc1.name, fc2.name))
        deferred.update((e.name, shared[0].name))
        adds.add(add.name)
    return latent, deferred, adds


def _inputs_of(n: Node, producer: dict[str, Node]) -> list[Node]:
    return [producer[v] for v in n.inputs if v in producer]


def _values(n: Node) -> list[str]:
    return [n.name if i == 0 else f"{n.name}#{i}" for i in range(len(n.outputs))]


def _stays_replicated(n: Node, users: dict[str, list[Node]]) -> bool:
    """Router logits, per-token scalar gates and whole-vector-normalised latents are not split."""
    g = n.kernel.geometry_as(GemmGeometry)
    if g.n == 1 or _feeds_indexer(n, users) or _single_kv_head(n, users):
        return True
    for v in _values(n):
        for u in users.get(v, []):
            ua = u.attrs
            if not isinstance(ua, KernelAttrs):
                continue
            if ua.kind is KernelKind.MOE_ROUTER:
                return True
            if ua.kind in (KernelKind.RMS_NORM, KernelKind.LAYER_NORM):
                ng = ua.geometry_as(NormGeometry)
                if ng.dim == ng.width and _whole_norm_consumer(u, users, g.k) == "latent":
                    return True
    return False


def _mamba1_channel_operand(n: Node, users: dict[str, list[Node]], graph: Graph) -> bool:
    """A once-per-step kernel on one 1-D parameter whose only users are Mamba-1 scans of as many channels."""
    width = n.kernel.geometry_as(ElementwiseGeometry).width
    spec = graph.params.get(n.inputs[0]) if len(n.inputs) == 1 else None
    if n.kernel.rows is not Rows.ONCE or spec is None or len(spec.shape) != 1:
        return False
    us = [u for v in _values(n) for u in users.get(v, [])]
    return bool(us) and all(isinstance(u.attrs, KernelAttrs) and isinstance(u.attrs.geometry, LinearAttentionGeometry)
                            and u.attrs.geometry.kind == "mamba1" and u.attrs.geometry.num_v_heads == width for u in us)


def _kda_low_rank_down(n: Node, users: dict[str, list[Node]], graph: Graph) -> bool:
    """The first half of a low-rank projection pair inside a Kimi Delta Attention module (a GEMM whose only users
    are GEMMs that expand its n again, and a kda kernel in the same module): vLLM builds f_a_proj and g_a_proj as
    ReplicatedLinear and their f_b_proj / g_b_proj as ColumnParallelLinear (model_executor/layers/kda.py
    KimiDeltaAttention.__init__), so no all-reduce follows the pair."""
    width = n.kernel.geometry_as(GemmGeometry).n
    us = [u for v in _values(n) for u in users.get(v, [])]
    if not us or not all(isinstance(u.attrs, KernelAttrs) and u.attrs.kind is KernelKind.GEMM
                         and u.attrs.geometry_as(GemmGeometry).k == width for u in us):
        return False
    return any(isinstance(m.attrs, KernelAttrs) and isinstance(m.attrs.geometry, LinearAttentionGeometry)
               and m.attrs.geometry.kind == "kda" and (n.scope + ".").startswith(m.scope + ".") for m in graph.nodes)


def _feeds_indexer(n: Node, users: dict[str, list[Node]]) -> bool:
    """A projection of DSA's indexer (q, k through its norm, or the head weights): vLLM builds them as
    ReplicatedLinear (models/deepseek_v2.py Indexer: "no tensor parallel, just replicated")."""
    todo, seen = [n], {n.name}
    while todo:
        for v in _values(todo.pop()):
            for u in users.get(v, []):
                if u.name in seen or not isinstance(u.attrs, KernelAttrs):
                    continue
                seen.add(u.name)
                if u.attrs.kind is KernelKind.SPARSE_INDEXER or u.attrs.rule == "kv_compress":
                    # DeepSeek-V4's compressors too: deepseek_compressor.py fused_wkv_wgate is disable_tp
                    return True
                if u.attrs.kind in (KernelKind.LAYER_NORM, KernelKind.RMS_NORM, KernelKind.ELEMENTWISE) and len(seen) < 16:
                    todo.append(u)
    return False


def _single_kv_head(n: Node, users: dict[str, list[Node]]) -> bool:
    """The projection of an attention's one shared KV head (its n = the head's width), reached through per-token
    kernels: no tp splits it, every rank computes it whole (DeepSeek-V4's kv part of fused_wqa_wkv, which
    vLLM's attention reads whole on each rank: models/deepseek_v4 attention, `qr, kv = qr_kv.split([q_lora_rank,
    head_dim])`)."""
    width = n.kernel.geometry_as(GemmGeometry).n
    todo, seen = [n], {n.name}
    while todo:
        for v in _values(todo.pop()):
            for u in users.get(v, []):
                if u.name in seen or not isinstance(u.attrs, KernelAttrs):
                    continue
                seen.add(u.name)
                if u.attrs.kind is KernelKind.ATTENTION:
                    ag = u.attrs.geometry_as(AttentionGeometry)
                    if ag.num_kv_heads == 1 and not ag.is_mla and width == ag.head_dim:
                        return True
                elif u.attrs.kind in _PASS_THROUGH | {KernelKind.RMS_NORM, KernelKind.LAYER_NORM} and len(seen) < 16:
                    todo.append(u)
    return False


# Kernels a normalised projection output may pass through on its way to its consumer (per token,
# no contraction): casts, gates, rotary.
_PASS_THROUGH = PER_TOKEN | {KernelKind.ROTARY}


def _whole_norm_consumer(norm: Node, users: dict[str, list[Node]], k: int) -> str:
    """What consumes a projection output that is normalised as one whole vector, following the
    data flow through per-token kernels:
    - "heads": a head-parallel kernel (attention, linear attention, conv1d), or a GEMM that contracts
      back to the projection's input width (n == k, the mixer's out_proj): the projection is
      column-parallel and the norm runs on each rank's slice. vLLM does so for MiniMax-M2's q/k
      norms over all heads (models/minimax_m2.py MiniMaxM2Attention: qkv_proj is a
      QKVParallelLinear, q_norm/k_norm are MiniMaxText01RMSNormTP) and for Mamba2's gated norm
      (layers/mamba/mamba_mixer2.py MambaMixer2: in_proj column-parallel, out_proj RowParallelLinear,
      norm Mixer2RMSNormGated on the rank's slice);
    - "latent": only GEMMs that expand the vector again (an MLA latent: kv_a_proj -> kv_a_layernorm ->
      kv_b_proj, models/deepseek_v2.py DeepseekV2MLAAttention, ReplicatedLinear for the latent);
    - "other": neither (kept replicated, as before)."""
    seen: set[str] = set()
    todo = [norm]
    gemms: list[Node] = []
    while todo:
        m = todo.pop()
        for v in _values(m):
            for u in users.get(v, []):
                if u.name in seen or not isinstance(u.attrs, KernelAttrs):
                    continue
                seen.add(u.name)
                kind = u.attrs.kind
                if kind in (KernelKind.ATTENTION, KernelKind.LINEAR_ATTENTION, KernelKind.CONV1D):
                    return "heads"
                if kind is KernelKind.GEMM:
                    gemms.append(u)
                elif kind in _PASS_THROUGH and len(seen) < 64:
                    todo.append(u)
    if any(m.kernel.geometry_as(GemmGeometry).n == k for m in gemms):
        return "heads"
    return "latent" if gemms else "other"


def _shard_channel_params(n: Node, graph: Graph, params: dict[str, TensorSpec], t: int, where: str) -> None:
    """The parameters of a kernel on sharded activations are per channel or per head (a conv1d's
    weight and bias, Mamba2's dt_bias and D, a norm's weight over the whole vector): each rank holds
    its slice (dim 0 / t), as vLLM loads them with sharded_weight_loader(0)
    (layers/mamba/mamba_mixer2.py MambaMixer2.__init__, Mixer2RMSNormGated.__init__). A per-head
    norm's weight (its length is the head dim it normalises, shorter than the width) is shared by
    all heads and stays whole."""
    a = n.kernel
    g = a.geometry
    for v in n.inputs:
        spec = graph.params.get(v)
        if spec is None or not spec.shape or not isinstance(spec.shape[0], int):
            continue
        if isinstance(g, NormGeometry) and spec.shape[0] == g.dim and g.dim < g.width * t:
            continue  # a per-head norm weight (the same for every head)
        if spec.shape[0] % t == 0:
            params[v] = _shard_dim(spec, 0, t, "per-channel parameter", where)
        elif isinstance(g, ElementwiseGeometry) and g.num_v_heads and spec.shape.count(1) == len(spec.shape) - 1 \
                and g.num_v_heads * t in spec.shape:
            # one value per head in a broadcast layout (KDA's A_log [1, 1, H, 1]: vLLM kda.py loads it with
            # sharded_weight_loader(2), num_heads // tp per rank)
            params[v] = _shard_dim(spec, spec.shape.index(g.num_v_heads * t), t, "per-head parameter", where)


def _variance_group(n: Node, a, graph: Graph) -> str | None:
    """The producer a norm over a whole vector wider than one head reads (its all-reduce group),
    or None. The gated Mamba2 norm is excluded: vLLM's Mixer2RMSNormGated.forward_native
    (layers/mamba/mamba_mixer2.py) normalises rank-local groups with no collective when the tp
    size divides n_groups (the group count is not in the graph: assumed so); with one group (n_groups == 1,
    any other tp that does not divide it is refused) it all-reduces the sum of squares: the run loop adds
    that for the norms mamba_groups.plan lists."""
    if not isinstance(a, KernelAttrs) or a.kind not in (KernelKind.RMS_NORM, KernelKind.LAYER_NORM):
        return None
    if a.name == "rms_norm_gated":
        return None
    g = a.geometry_as(NormGeometry)
    if g.dim != g.width and not (g.width < g.dim):
        return None
    acts = [v for v in n.inputs if v not in graph.params]
    if not acts:
        return None
    return split_value(acts[0])[0]


def _per_token_dims(g: Geometry) -> list[int]:
    """The per-token sizes a tp split divides, in the order their divisibility is checked."""
    if isinstance(g, ElementwiseGeometry):
        return [v for v in (g.width, g.in_width, g.num_v_heads) if v is not None]
    if isinstance(g, NormGeometry):
        return [g.width]
    raise TypeError(f"no per-token split for {type(g).__name__}")


def _split_per_token(g: Geometry, t: int, where: str) -> Geometry:
    """A per-token kernel on sharded activations: its per-token sizes divided by t (a norm keeps the
    vector length it normalises)."""
    if isinstance(g, ElementwiseGeometry):
        width = split(g.width, t, "per-token width", where)
        in_width = None if g.in_width is None else split(g.in_width, t, "per-token in_width", where)
        heads = None if g.num_v_heads is None else split(g.num_v_heads, t, "per-token num_v_heads", where)
        return replace(g, width=width, in_width=in_width, num_v_heads=heads)
    if isinstance(g, NormGeometry):
        return replace(g, width=split(g.width, t, "per-token width", where))
    raise TypeError(f"no per-token split for {type(g).__name__}")


def _attention(a: KernelAttrs, t: int, where: str, bump) -> KernelAttrs:
    g = a.geometry_as(AttentionGeometry)
    heads = split(g.num_heads, t, "num_attention_heads", where)
    kv = g.num_kv_heads
    if g.is_mla:  # MLA: the latent is whole on every rank; heads split
        bump("mla_heads_split")
        return a.with_geometry(replace(g, num_heads=heads, num_kv_heads=heads))
    if kv >= t:
        kv_rank = split(kv, t, "num_key_value_heads", where)
        bump("attention_heads_split")
        return a.with_geometry(replace(g, num_heads=heads, num_kv_heads=kv_rank))
    if t % kv != 0:
        raise PassError(f"{where}: tp size {t} is not a multiple of num_key_value_heads = {kv}; "
                        "KV heads cannot be replicated evenly")
    bump("kv_heads_replicated")
    return a.with_geometry(replace(g, num_heads=heads, num_kv_heads=1, kv_replicas=t // kv))
