"""The cost of a speculative-decoding step: the target's verification, the draft's forwards, the samplers.

A step of B decoding sequences at context C with k drafts each (vLLM V1; speculative.py has the sources):

    verify   = target tree over the step's groups, each decoding sequence's k + 1 queries as k + 1 decode rows
               at context C + k/2 (`verify_step`): GEMMs at B·(k+1) tokens, the one-row-per-sequence kernels (LM
               head) at B·(k+1) rows — vLLM computes logits at every draft position (`SpecDecodeMetadata.
               logits_indices`, vllm/v1/worker/gpu_model_runner.py `_calc_spec_decode_metadata`) — and decode
               attention at B·(k+1) rows, aiconfigurator's convention;
    draft    = pass 1 over the same tokens (`EagleProposer.propose` runs the draft over every scheduled token
               and samples at each request's last one: `last_token_indices`), then k − 1 passes of one token
               per sequence (its loop over `num_speculative_tokens`), vllm/v1/spec_decode/eagle.py at 008603a3;
    sampler  = the rejection sampler over the B·k draft rows the plain sampler does not read, and the draft's
               argmax per pass (B rows × k): rows × vocab × SAMPLE_BYTES_PER_LOGIT / HBM bandwidth (roofline, the
               formula of serving/host.py for the plain sampler).

The draft's tree, by method:

- mtp: the target's own graph: its embedding, the MTP layer priced as the target's last decoder layer (vLLM builds
  the MTP block as a decoder layer at index num_hidden_layers, so it takes the last layer's kind: MoE for
  DeepSeek-V3, full attention for Qwen3-Next), `enorm`/`hnorm` (two RMS norms of width hidden) and `eh_proj`
  (a GEMM 2·hidden → hidden, replicated on every rank: `nn.Linear` in vllm/model_executor/models/deepseek_mtp.py
  `DeepSeekMultiTokenPredictorLayer`), then the final norm and LM head (`shared_head`). vLLM runs one MTP layer per
  draft pass (`spec_step_idx % num_mtp_layers`), so a pass is one layer whatever the MTP layer count.
- eagle / eagle3 / draft_model: the draft checkpoint traced and fused like any model (`build_cost_model`), at the
  target's TP (vLLM's default `draft_tensor_parallel_size`); EAGLE adds its `fc` GEMM over the concatenated
  embedding and hidden state (2·hidden → hidden, vllm/model_executor/models/llama_eagle.py), EAGLE-3 its `fc`
  over three target hidden states (3·hidden → hidden, llama_eagle3.py `combine_hidden_states`).
- ngram: no GPU work; the host's n-gram match (vllm/v1/spec_decode/ngram_proposer.py, numba on the CPU) has no
  published per-sequence time graphsim could cite, so it is charged 0 and the breakdown says `missing`.

Not modelled: EAGLE-3's first layer reading the 2·hidden concatenation (the traced draft's QKV reads hidden), the
`cat` of the two halves before `eh_proj`, tree drafts, and CUDA-graph padding of the draft batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from graphsim.costing.cost_model import CostModel
from graphsim.costing.cost_tree import (
    CompiledTree, Labeled, Leaf, Max, NodeKind, Parallel, Scale, Sum, Tree, compile_tree,
)
from graphsim.costing.interpolate import SOURCES, KernelPricer
from graphsim.costing.kernel_map import Dtypes
from graphsim.ir.geometry import GemmGeometry
from graphsim.ir.kernel import KernelKind, Rows
from graphsim.serving.host import SAMPLE_BYTES_PER_LOGIT
from graphsim.serving.speculative import SpeculativeConfig, SpeculativeError
from graphsim.workload import SeqGroup, Step


# --- trees ------------------------------------------------------------------------------------------------------
def decompile(c: CompiledTree, i: int | None = None) -> Tree:
    """The subtree of a compiled tree at node `i` (default: the root) as a `Tree` again."""
    i = c.root if i is None else i
    kind, kids = c.kinds[i], c.children[i]
    if kind is NodeKind.LEAF:
        return c.leaves[c.leaf_of[i]]
    if kind is NodeKind.SCALE:
        return Scale(c.scale[i], decompile(c, kids[0]))
    if kind is NodeKind.LABELED:
        return Labeled(c.labels[i], decompile(c, kids[0]))
    parts = tuple(decompile(c, j) for j in kids)
    return {NodeKind.SUM: Sum, NodeKind.MAX: Max, NodeKind.PARALLEL: Parallel}[kind](parts)


def _labeled(c: CompiledTree, pred) -> list[int]:
    return [i for i, (k, label) in enumerate(zip(c.kinds, c.labels, strict=True))
            if k is NodeKind.LABELED and pred(label)]


def _leaves_of(c: CompiledTree, i: int) -> list[Leaf]:
    out: list[Leaf] = []
    stack = [i]
    while stack:
        j = stack.pop()
        if c.leaf_of[j] >= 0:
            out.append(c.leaves[c.leaf_of[j]])
        stack.extend(c.children[j])
    return out


def mtp_draft_tree(cm: CostModel) -> tuple[CompiledTree, str]:
    """The draft forward of one MTP pass, built from the target's compiled tree (module docstring), and a note."""
    c, graph = cm.tree, cm.graph
    sched = graph.schedule
    if sched is None or not sched.tags:
        raise SpeculativeError(f"{graph.name}: the traced graph has no decoder-layer schedule to price the MTP layer "
                               "from (run the fold pass)")
    last = sched.tags[-1]
    region = _labeled(c, lambda s: s.startswith(f"{last} ×"))
    before = _labeled(c, lambda s: s == "before layers")
    after = _labeled(c, lambda s: s == "after layers")
    if not region:
        raise SpeculativeError(f"{graph.name}: no cost-tree region for its last layer type {last}")
    body = c.children[region[0]][0]
    layer = decompile(c, c.children[body][0]) if c.kinds[body] is NodeKind.SCALE else decompile(c, body)
    head = [leaf for i in after for leaf in _leaves_of(c, i)]
    gemm = next((lf for lf in head if lf.attrs.kind is KernelKind.GEMM), None)
    norm = next((lf for lf in head if lf.attrs.kind in (KernelKind.RMS_NORM, KernelKind.FUSED_ADD_RMS_NORM,
                                                          KernelKind.LAYER_NORM)), None)
    if gemm is None:
        raise SpeculativeError(f"{graph.name}: no LM head GEMM after the layers to price the MTP head with")
    hidden = gemm.attrs.geometry_as(GemmGeometry).k
    dtype = gemm.attrs.dtype  # the LM head's (unquantized) dtype: eh_proj is a plain nn.Linear
    eh = Leaf("mtp.eh_proj", replace(gemm.attrs, name="eh_proj", geometry=GemmGeometry(n=hidden, k=2 * hidden),
                                     dtype=dtype, rows=Rows.TOKENS, covers=(), rule="speculative: MTP eh_proj"))
    extra: list[Tree] = [eh]
    if norm is not None:
        for name in ("enorm", "hnorm"):
            extra.append(Leaf(f"mtp.{name}", replace(norm.attrs, name=name, rows=Rows.TOKENS, covers=(),
                                                     rule="speculative: MTP input norm")))
    parts: list[Tree] = [decompile(c, i) for i in before]
    parts.append(Labeled("mtp input: enorm, hnorm, eh_proj", Sum(tuple(extra))))
    parts.append(Labeled(f"mtp layer (priced as a {last} layer)", layer))
    parts.extend(decompile(c, i) for i in after)
    note = (f"MTP draft pass: embedding, enorm/hnorm, eh_proj {2 * hidden}→{hidden}, one {last} layer, final norm, "
            "LM head" + ("" if norm is not None else " (no norm kernel found to price enorm/hnorm: left out)"))
    return compile_tree(Labeled("draft (mtp)", Sum(tuple(parts)))), note


def model_draft_tree(draft: CostModel, method: str) -> tuple[CompiledTree, str]:
    """A draft checkpoint's own tree, plus EAGLE's `fc` (2·hidden, EAGLE-3: 3·hidden → hidden)."""
    c = draft.tree
    if method not in ("eagle", "eagle3"):
        return c, f"draft model {draft.graph.name}: its own traced graph"
    head = [lf for lf in c.leaves if lf.attrs.kind is KernelKind.GEMM and lf.attrs.rows is Rows.SEQUENCES]
    gemms = head or [lf for lf in c.leaves if lf.attrs.kind is KernelKind.GEMM]
    if not gemms:
        raise SpeculativeError(f"draft {draft.graph.name}: no GEMM to read its hidden size from")
    hidden = gemms[-1].attrs.geometry_as(GemmGeometry).k
    width = 3 if method == "eagle3" else 2
    fc = Leaf(f"{method}.fc", replace(gemms[-1].attrs, name="fc", geometry=GemmGeometry(n=hidden, k=width * hidden),
                                      rows=Rows.TOKENS, covers=(), rule=f"speculative: {method} fc"))
    tree = Labeled(f"draft ({method})", Sum((Labeled(f"{method} fc", fc), decompile(c))))
    return compile_tree(tree), f"{method} draft {draft.graph.name}: fc {width * hidden}→{hidden}, then its traced layers"


def _rows_tree(c: CompiledTree) -> CompiledTree | None:
    """The tree's one-row-per-sequence kernels (LM head, …), outside attention, as a flat sum."""
    idx = [i for i, lf in enumerate(c.leaves) if lf.attrs.rows is Rows.SEQUENCES and lf.attrs.kind is not KernelKind.ATTENTION]
    if not idx:
        return None
    return compile_tree(Sum(tuple(Scale(int(c.multiplicity[i]), c.leaves[i]) if c.multiplicity[i] != 1 else c.leaves[i]
                                  for i in idx)))


# --- pricing ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpecPart:
    name: str
    time_us: float
    source: str
    note: str = ""


@dataclass
class SpecStepReport:
    """One speculative step of B decoding sequences at context C: its parts, total and tokens."""

    spec: str
    sequences: int
    context: int
    k: int
    parts: list[SpecPart]
    expected_tokens_per_sequence: float
    plain_decode_us: float  # the same batch decoding one token each, no speculation
    plain_source: str

    @property
    def total_us(self) -> float:
        return sum(p.time_us for p in self.parts)

    @property
    def source(self) -> str:
        return SOURCES[max(_code(p.source) for p in self.parts)].value

    @property
    def us_per_token(self) -> float:
        return self.total_us / (self.sequences * self.expected_tokens_per_sequence)

    @property
    def speedup(self) -> float:
        """Plain decode time per token over the speculative step's expected time per token."""
        return self.plain_decode_us / self.sequences / self.us_per_token if self.us_per_token > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.spec, "sequences": self.sequences, "context": self.context, "k": self.k,
                "parts": [vars(p) for p in self.parts], "total_us": self.total_us, "source": self.source,
                "expected_tokens_per_sequence": self.expected_tokens_per_sequence,
                "us_per_token": self.us_per_token, "plain_decode_us": self.plain_decode_us,
                "plain_source": self.plain_source, "speedup": self.speedup}


def _code(source: str) -> int:
    return next(i for i, s in enumerate(SOURCES) if s.value == source)


def verify_step(sequences: int, context: int, k: int, chunks: Sequence[tuple[int, int]] = ()) -> Step:
    """The target's verification as graphsim prices it: each decoding sequence's k + 1 queries as k + 1 decode
    rows at the mean context C + k/2 (aiconfigurator's convention, aiconfigurator_core/sdk/rust_engine_step.py:
    "decode attention with the (nextn+1) decode-batch scaling"): GEMMs see B·(k+1) tokens, the LM head B·(k+1)
    rows (vLLM computes logits at every draft position), decode attention B·(k+1) rows that each read the
    context — an upper bound on KV reads for kernels that load a sequence's KV once for all its queries
    (FlashMLA). Prefill chunks ride along as their own groups."""
    groups = [SeqGroup(n, p, 1) for n, p in chunks]
    if sequences:
        groups.append(SeqGroup(1, context + k // 2, sequences * (k + 1)))
    return Step(tuple(groups))


class SpecPricer:
    """Prices speculative steps exactly on the target's and the draft's compiled trees (predict's path;
    `SpecIterationCost` is the simulator's table-driven one)."""

    def __init__(self, cm: CostModel, spec: SpeculativeConfig, draft: CompiledTree | None,
                 draft_pricer: KernelPricer | None, draft_dtypes: Dtypes | None, draft_note: str,
                 vocab: int, bandwidth_bytes_per_s: float) -> None:
        self.cm, self.spec, self.k = cm, spec, spec.k
        self.draft, self.draft_pricer, self.draft_dtypes, self.draft_note = draft, draft_pricer, draft_dtypes, draft_note
        self.draft_rows = _rows_tree(draft) if draft is not None else None
        self.vocab, self.bandwidth = vocab, bandwidth_bytes_per_s

    def draft_cost_model(self) -> CostModel | None:
        """The draft tree as a CostModel (for `costing.predict.predict`'s kernel table); None for ngram."""
        if self.draft is None:
            return None
        assert self.draft_pricer is not None and self.draft_dtypes is not None
        return replace(self.cm, tree=self.draft, pricer=self.draft_pricer, dtypes=self.draft_dtypes)

    def _eval(self, tree: CompiledTree, steps: list[Step], pricer: KernelPricer, dtypes: Dtypes):
        ev = tree.evaluate(steps, pricer, dtypes)
        return ev.total_us(), ev.node_source[tree.root]

    def sampler_us(self, verifying: int, seqs: int) -> float:
        """Rejection sampler over the verifying sequences' k draft rows (beyond the plain sampler's one a
        sequence) and the draft's argmax over `seqs` rows per pass."""
        if self.bandwidth <= 0:
            return 0.0
        rows = verifying * self.k + (seqs * self.k if self.draft is not None else 0)
        return rows * self.vocab * SAMPLE_BYTES_PER_LOGIT / self.bandwidth * 1e6

    def attention_read_once_us(self, verifying: int, context: int) -> tuple[float, float]:
        """The verify step's attention as priced (B·(k+1) decode rows: each query re-reads its sequence's KV, an
        upper bound) and as B decode rows at the same context (each sequence's KV read once, its extra queries'
        compute free: a lower bound), µs. FlashAttention's varlen kernel and FlashMLA take a sequence's k+1
        queries in one pass; where the truth lies between the two depends on the kernel's compute share."""
        cm, k = self.cm, self.k
        attn = np.asarray([lf.attrs.kind is KernelKind.ATTENTION for lf in cm.tree.leaves])
        ev = cm.evaluate([verify_step(verifying, context, k), Step((SeqGroup(1, context + k // 2, verifying),))])
        lt = ev.leaf_time_us * cm.tree.multiplicity[:, None]
        both = np.nansum(lt[attn], axis=0) if attn.any() else np.zeros(2)
        return float(both[0]), float(both[1])

    def draft_steps(self, sequences: int, context: int, chunks: Sequence[tuple[int, int]] = ()) -> list[Step]:
        """Pass 1 (the verify step's tokens) and one later pass (a token a sequence, one position on)."""
        seqs = sequences + len(chunks)
        return [verify_step(sequences, context, self.k, chunks),
                Step((SeqGroup(1, context + self.k // 2 + 1, seqs),))]

    def parts(self, verifying: int, context: int, chunks: list[tuple[int, int]]) -> list[SpecPart]:
        """The parts of one step: `verifying` sequences at `context` with k drafts each, plus prefill chunks."""
        k, cm = self.k, self.cm
        seqs = verifying + len(chunks)
        t, s = self._eval(cm.tree, [verify_step(verifying, context, k, chunks)], cm.pricer, cm.dtypes)
        note = "as decode rows B·(k+1) at context C + k/2"
        if verifying:
            once = self.attention_read_once_us(verifying, context)
            note += (f"; attention {once[0]:,.0f} µs of it, {once[1]:,.0f} µs if each sequence's KV were read once "
                     "for its k+1 queries (B decode rows)")
        out = [SpecPart(f"verify: target, {k + 1} query tokens a decoding sequence", float(t[0]),
                        SOURCES[int(s[0])].value, note)]
        if self.draft is None:
            out.append(SpecPart("draft: n-gram match on the host", 0.0, "missing",
                                "no published per-sequence time for vLLM's numba n-gram proposer; charged 0"))
        else:
            assert self.draft_pricer is not None and self.draft_dtypes is not None
            d, ds = self._eval(self.draft, self.draft_steps(verifying, context, chunks), self.draft_pricer,
                               self.draft_dtypes)
            first, src1 = float(d[0]), int(ds[0])
            if self.draft_rows is not None and verifying:  # the draft samples at each request's last token only
                r, rs = self._eval(self.draft_rows, [Step((SeqGroup(1, 0, seqs + verifying * k),)),
                                                     Step((SeqGroup(1, 0, seqs),))], self.draft_pricer, self.draft_dtypes)
                first -= float(r[0] - r[1])
                src1 = max(src1, int(rs[0]), int(rs[1]))
            out.append(SpecPart("draft pass 1 over the step's tokens", first, SOURCES[src1].value))
            if k > 1:
                out.append(SpecPart(f"draft passes 2..{k}: one token a sequence, ×{k - 1}", float(d[1]) * (k - 1),
                                    SOURCES[int(ds[1])].value))
        out.append(SpecPart("samplers: rejection (k rows a sequence) + draft argmax", self.sampler_us(verifying, seqs),
                            "roofline", f"rows × vocab {self.vocab} × {SAMPLE_BYTES_PER_LOGIT} B / HBM bandwidth"))
        return out


class SpecIterationCost:
    """The simulator's `IterationCost` with speculative decoding: the engine passes `dec_count` verifying
    sequences (k + 1 scheduled tokens each, counted in `tokens`); the target and draft are priced from their own
    iteration costs (`pricing.iteration_cost`, built with max_seqs × (k + 1) rows) as `SpecPricer` prices them."""

    def __init__(self, target: Any, draft: Any | None, k: int, vocab: int, bandwidth_bytes_per_s: float) -> None:
        self.target, self.draft, self.k = target, draft, k
        self.vocab, self.bandwidth = vocab, bandwidth_bytes_per_s

    def sampler_us(self, verifying: int, seqs: int) -> float:
        if self.bandwidth <= 0:
            return 0.0
        rows = verifying * self.k + (seqs * self.k if self.draft is not None else 0)
        return rows * self.vocab * SAMPLE_BYTES_PER_LOGIT / self.bandwidth * 1e6

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]:
        k = self.k
        rows = dec_count * (k + 1)
        ctx = dec_ctx_mean + k / 2
        t, src = self.target.step_us(tokens, rows + len(chunks), rows, ctx, chunks)
        if self.draft is not None:
            d1, s1 = self.draft.step_us(tokens, seqs, rows, ctx, chunks)
            t, src = t + d1, max(src, s1)
            if k > 1:
                d2, s2 = self.draft.step_us(seqs, seqs, seqs, ctx + 1, [])
                t, src = t + d2 * (k - 1), max(src, s2)
        # the samplers are a memory roofline; like the plain sampler (host.py `EngineHost.iteration_us`) they do not
        # set the iteration's kernel source (predict's breakdown shows them as roofline)
        return t + self.sampler_us(dec_count, seqs), src

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        out = [self.step_us(batch * (self.k + 1), batch, batch, ctx_mean0 + j, []) for j in range(k)]
        return np.asarray([t for t, _ in out]), np.asarray([s for _, s in out], dtype=np.int8)


def speculative_pricer(cm: CostModel, spec: SpeculativeConfig, vocab: int, draft_source: Any = None) -> SpecPricer:
    """The pricer of `spec` on the target `cm`. `draft_source`: for eagle/eagle3/draft_model, what to trace (a
    model argument or a loader; default: `spec.model`); it is traced at the target's TP on the same hardware and
    profile."""
    bw = cm.hardware.memory_bandwidth_bytes_per_s if cm.hardware is not None else 0.0
    spec.check_tp(cm.tp)
    if spec.method == "ngram":
        return SpecPricer(cm, spec, None, None, None, "n-gram: no GPU draft; the host's n-gram match is not priced (no "
                          "published per-sequence time for vLLM's numba proposer): missing, charged 0", vocab, bw)
    if spec.method == "mtp":
        tree, note = mtp_draft_tree(cm)
        return SpecPricer(cm, spec, tree, cm.pricer, cm.dtypes, note, vocab, bw)
    from graphsim.cost_model import build_cost_model
    from graphsim.serving.speculative import draft_model

    source = draft_source if draft_source is not None else draft_model(spec)
    draft = build_cost_model(source, cm.hardware, tp=cm.tp, kv_dtype=cm.kv_dtype,
                             profile=cm.pricer.db, default_profile=False)
    tree, note = model_draft_tree(draft, spec.method)
    return SpecPricer(cm, spec, tree, draft.pricer, draft.dtypes, note, vocab, bw)


def spec_report(pricer: SpecPricer, label: str, sequences: int, context: int, expected_tokens: float) -> SpecStepReport:
    """The breakdown of a decode batch `sequences`×`context` run speculatively, with the plain decode beside it."""
    cm = pricer.cm
    parts = pricer.parts(sequences, context, [])
    plain, ps = pricer._eval(cm.tree, [Step((SeqGroup(1, context, sequences),))], cm.pricer, cm.dtypes)
    return SpecStepReport(label, sequences, context, pricer.k, parts, expected_tokens, float(plain[0]),
                          SOURCES[int(ps[0])].value)


__all__ = ["SpecIterationCost", "SpecPart", "SpecPricer", "SpecStepReport", "decompile", "model_draft_tree",
           "mtp_draft_tree", "spec_report", "speculative_pricer", "verify_step"]
