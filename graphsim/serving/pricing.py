"""Iteration times for the simulator, from the compiled CostTree, fast.

Pricing one `Step` through `CompiledTree.evaluate` costs about a millisecond of Python; pricing
thousands at once costs microseconds each. A simulation needs an iteration time before it can
schedule the next iteration, so `TreeCost` prices *tables* in bulk instead and looks them up:

When the tree only sums its leaves (Sum / Scale / Labeled, and Max or Parallel over a single child —
what `build_tree` makes, since TP ranks are identical), an iteration's time is exactly

    Σ_leaves multiplicity × leaf time
      = G(T) + H(S) + C + Σ_groups A(group)

with G the leaves whose rows are the step's tokens T, H those whose rows are its sequences S, C
those priced once, and A the attention leaves, which `cost_tree.price_leaves` prices per sequence
group and sums. `TreeCost` evaluates the tree (`CompiledTree.evaluate`) on probe steps and reads the
per-leaf times it returns:

- G and H for every T ≤ max_num_batched_tokens and S ≤ max_num_seqs, exactly (two bulk calls);
- A for a prefill chunk of n tokens with no cached prefix, exactly for every n (same probes);
- A for a decode group of B sequences at context c, and for a chunk of n tokens after p cached,
  on a grid of contexts (every 16 up to 1024, then steps of 1/64), one bulk call per B or per p
  the first time it is needed, linearly interpolated between grid points (error ~1e-4).

The simulator prices the decode sequences of an iteration as one group of B sequences at their mean
context (decode attention reads every cached token once, so its time follows the total context —
as vLLM's one varlen launch does) and each prefill chunk as its own group.

Overlapped streams (`Parallel` nodes of more than one child, with their token limit, and leaves launched only up to
a token limit — vLLM's shared-expert stream, `costing.streams`) keep the tables exact when every leaf below them is
priced by the step's tokens: the overlap then hides a time that depends on T alone, so G(T) is read off the tree's
own node times on the same token probes (Σ leaves − Σ overlaps' hidden time). The split by source takes the hidden
time off each overlap's leaves in proportion to their time.

A tree that is not a plain sum (or such an overlap) falls back to `MemoCost`: exact evaluation of each distinct step,
memoised, decode runs priced in one call. Every time carries the worst source of its leaves
(`graphsim.costing.interpolate.SOURCES` codes); a missing leaf is an error naming the kernel.
For the shares of predicted time by source, each engine carries a meter (`new_meter`): `TableMeter` splits every
table by leaf source, so a share is kernel time; `WorstSourceMeter` (costs without splits) counts each iteration
under its worst source.
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from graphsim.costing.cost_tree import CompiledTree, NodeKind
from graphsim.costing.interpolate import DERIVED, MISSING, SOURCES, KernelPricer
from graphsim.costing.kernel_map import Dtypes
from graphsim.errors import GraphsimError
from graphsim.ir.kernel import KernelKind, Rows
from graphsim.workload import SeqGroup, Step

if TYPE_CHECKING:
    from graphsim.serving.mixed_attention import MixedDecode


class MissingTimingError(GraphsimError):
    """An iteration time is missing: some kernel has no measured row and no roofline."""


class IterationCost(Protocol):
    """What the simulator asks: µs and a source code (index into SOURCES)."""

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]: ...

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int) -> tuple[np.ndarray, np.ndarray]: ...


NUM_SOURCES = len(SOURCES)
BULK_STEPS = 4096  # probe steps per bulk evaluation when warming rows: each column is priced on its own, so splitting
# a warm-up into calls of this many steps gives the same rows with its temporaries bounded (~10 MB, not ~50)


class SourceMeter(Protocol):
    """Per-source shares of the iteration times an engine committed (`step` for one iteration, `run` for a decode
    segment of len(times_us) iterations); `source_us()` is µs of predicted time per SOURCES code."""

    basis: str  # what a share is made of: "kernel" (leaf sources) or "iteration worst source"

    def step(self, us: float, source: int, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
             chunks: list[tuple[int, int]]) -> None: ...

    def run(self, times_us: np.ndarray, sources: np.ndarray, batch: int, ctx_mean0: float) -> None: ...

    def source_us(self) -> np.ndarray: ...


class WorstSourceMeter:
    """Fallback for a cost without per-kernel splits: each iteration's whole time counts under its worst source
    (the shares then overstate the worse sources)."""

    basis = "iteration worst source"

    def __init__(self) -> None:
        self.us = np.zeros(NUM_SOURCES)

    def step(self, us: float, source: int, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
             chunks: list[tuple[int, int]]) -> None:
        self.us[source] += us

    def run(self, times_us: np.ndarray, sources: np.ndarray, batch: int, ctx_mean0: float) -> None:
        self.us += np.bincount(sources.astype(np.int64), weights=times_us, minlength=NUM_SOURCES)

    def source_us(self) -> np.ndarray:
        return self.us.copy()


def new_meter(cost: IterationCost) -> SourceMeter:
    """The cost's own kernel-level meter when it has one (`TreeCost`), else `WorstSourceMeter`."""
    if isinstance(cost, TreeCost):
        return cost.meter()
    own = getattr(cost, "meter", None)  # a cost made of TreeCosts (e.g. pipeline stages) meters through theirs
    return cast(SourceMeter, own()) if callable(own) else WorstSourceMeter()


def context_grid(max_context: int) -> np.ndarray:
    """0, 16, …, 1024, then geometric steps of 1/64 up to max_context (inclusive)."""
    lin = np.arange(0, min(1024, max_context) + 1, 16, dtype=np.float64)
    pts: list[np.ndarray] = [lin]
    if max_context > 1024:
        n = int(np.ceil(np.log(max_context / 1024) / np.log1p(1 / 64)))
        pts.append(np.round(1024 * (1 + 1 / 64) ** np.arange(1, n + 1)))
    grid = np.unique(np.concatenate([*pts, np.asarray([float(max_context)])]))
    return grid[grid <= max_context]


def chunk_grid(max_tokens: int) -> np.ndarray:
    """2 … 64 every token, then geometric steps of 1/64 up to max_tokens (inclusive)."""
    lin = np.arange(2, min(64, max_tokens) + 1, dtype=np.float64)
    pts: list[np.ndarray] = [lin]
    if max_tokens > 64:
        n = int(np.ceil(np.log(max_tokens / 64) / np.log1p(1 / 64)))
        pts.append(np.round(64 * (1 + 1 / 64) ** np.arange(1, n + 1)))
    grid = np.unique(np.concatenate([*pts, np.asarray([float(max_tokens)])]))
    return grid[(grid >= 2) & (grid <= max_tokens)]


def _token_leaf(tree: CompiledTree, i: int) -> bool:
    a = tree.leaves[i].attrs
    return a.kind is not KernelKind.ATTENTION and a.rows is Rows.TOKENS


def is_additive(tree: CompiledTree) -> bool:
    """A sum of leaves, up to overlaps whose hidden time depends on the step's tokens only (module docstring)."""
    if any(k is NodeKind.MAX and len(ch) > 1 for k, ch in zip(tree.kinds, tree.children, strict=True)):
        return False
    if not all(_token_leaf(tree, li) for leaves in tree.under.values() for li in leaves):
        return False
    limit = tree.leaf_limit()
    return all(_token_leaf(tree, int(i)) for i in np.flatnonzero(np.isfinite(limit)))


def _missing_names(tree: CompiledTree, leaf_src: np.ndarray) -> str:
    bad = [i for i in range(len(tree.leaves)) if (leaf_src[i] == MISSING).any()]
    names = [f"{tree.leaves[i].name} ({tree.leaves[i].attrs.kind.value} {tree.leaves[i].attrs.name})" for i in bad]
    return ", ".join(names[:8]) + (" …" if len(names) > 8 else "")


class TreeCost:
    """Table-driven iteration times of an additive CostTree (see the module docstring)."""

    def __init__(self, tree: CompiledTree, pricer: KernelPricer, dtypes: Dtypes, max_tokens: int, max_seqs: int,
                 max_context: int) -> None:
        if not is_additive(tree):
            raise ValueError("TreeCost needs an additive tree; use MemoCost")
        self.tree, self.pricer, self.dtypes = tree, pricer, dtypes
        self.max_tokens, self.max_seqs, self.max_context = max_tokens, max_seqs, max_context
        leaves = tree.leaves
        self._attn = np.asarray([lf.attrs.kind is KernelKind.ATTENTION for lf in leaves])
        rows = [lf.attrs.rows for lf in leaves]
        self._seq = np.asarray([r is Rows.SEQUENCES for r in rows]) & ~self._attn
        self._once = np.asarray([r is Rows.ONCE for r in rows]) & ~self._attn
        self._tok = ~(self._attn | self._seq | self._once)
        self._mult = tree.multiplicity[:, None]
        self.evaluations = 0  # probe steps priced (for the benchmark)
        # tokens probes: one prefill chunk of T tokens, no cache (T = 1 is a decode at context 0)
        t_ev = self.tree.evaluate([Step((SeqGroup(t, 0, 1),)) for t in range(1, max_tokens + 1)], pricer, dtypes)
        self.evaluations += max_tokens
        t_lt, t_ls = t_ev.leaf_time_us * self._mult, t_ev.leaf_source
        self.G, self.G_src = self._part(t_lt, t_ls, self._tok, pad=True)
        hidden = t_ev.hidden_us()  # (overlaps, T): µs each overlap hides, all on token leaves
        if len(hidden):
            self.G[1:] -= hidden.sum(axis=0)
            over_src = t_ev.node_source[tree.overlaps].max(axis=0)  # roofline where an overlap's floor binds
            self.G_src[1:] = np.maximum(self.G_src[1:], over_src)
        self.A0, self.A0_src = self._part(t_lt, t_ls, self._attn, pad=True)
        once_t, once_s = self._part(t_lt[:, :1], t_ls[:, :1], self._once)
        self.C, self.C_src = float(once_t[0]), int(once_s[0])
        s_lt, s_ls = self._leaf_times([Step((SeqGroup(1, 0, s),)) for s in range(1, max_seqs + 1)])
        self.H, self.H_src = self._part(s_lt, s_ls, self._seq, pad=True)
        # the same parts split by leaf source (rows: SOURCES codes), for TableMeter's time-weighted shares
        self.G_split = self._split(t_lt, t_ls, self._tok, pad=True)
        for k, node in enumerate(tree.overlaps):  # each overlap's hidden time off its own leaves, pro rata
            sel = np.zeros(len(leaves), dtype=bool)
            sel[tree.under[node]] = True
            own = self._split(t_lt, t_ls, sel, pad=True)
            whole = own.sum(axis=0)
            frac = np.divide(np.concatenate([[0.0], hidden[k]]), whole, out=np.zeros_like(whole), where=whole > 0)
            self.G_split -= own * frac
        self.A0_split = self._split(t_lt, t_ls, self._attn, pad=True)
        self.C_split = self._split(t_lt[:, :1], t_ls[:, :1], self._once)[:, 0]
        self.H_split = self._split(s_lt, s_ls, self._seq, pad=True)
        for arr in (self.G, self.H, self.A0):
            if np.isnan(arr[1:]).any() or np.isnan(self.C):
                src = np.concatenate([t_ls, s_ls], axis=1)
                raise MissingTimingError(f"iteration time missing: no data for {_missing_names(tree, src)}; import "
                                         "measured rows (--profile) or use a dtype the GPU spec has a peak for")
        self.ctx_grid = context_grid(max_context)
        self.n_grid = chunk_grid(max_tokens)
        self._dec: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._pre: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._dec_split: dict[int, np.ndarray] = {}
        self._pre_split: dict[int, np.ndarray] = {}
        # decode attention in a step with a prefill chunk where it differs from decode-only steps (vLLM V1's
        # FlashAttention-2: serving/mixed_attention.py); None: the same tables
        self.mixed: MixedDecode | None = None
        self._dec_mixed: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._dec_mixed_split: dict[int, np.ndarray] = {}

    # --- probes --------------------------------------------------------------------------------
    def _leaf_times(self, steps: list[Step]) -> tuple[np.ndarray, np.ndarray]:
        ev = self.tree.evaluate(steps, self.pricer, self.dtypes)
        self.evaluations += len(steps)
        return ev.leaf_time_us * self._mult, ev.leaf_source

    @staticmethod
    def _part(lt: np.ndarray, ls: np.ndarray, sel: np.ndarray, pad: bool = False) -> tuple[np.ndarray, np.ndarray]:
        t = lt[sel].sum(axis=0) if sel.any() else np.zeros(lt.shape[1])
        s = ls[sel].max(axis=0).astype(np.int8) if sel.any() else np.zeros(lt.shape[1], dtype=np.int8)
        if pad:  # index by count: entry 0 is "none of them"
            t = np.concatenate([[0.0], t])
            s = np.concatenate([np.zeros(1, dtype=np.int8), s])
        return t, s

    @staticmethod
    def _split(lt: np.ndarray, ls: np.ndarray, sel: np.ndarray, pad: bool = False) -> np.ndarray:
        """Like `_part`, the summed time of the selected leaves, but one row per SOURCES code."""
        out = np.zeros((NUM_SOURCES, lt.shape[1]))
        if sel.any():
            t, s = lt[sel], ls[sel]
            for code in np.unique(s):
                out[int(code)] = np.where(s == code, t, 0.0).sum(axis=0)
        if pad:
            out = np.concatenate([np.zeros((NUM_SOURCES, 1)), out], axis=1)
        return out

    def _check(self, t: np.ndarray, ls: np.ndarray, what: str) -> None:
        if np.isnan(t).any():
            raise MissingTimingError(f"attention time missing for {what}: no data for "
                                     f"{_missing_names(self.tree, ls)}; import measured rows (--profile)")

    def _decode_row(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        row = self._dec.get(batch)
        if row is None:
            lt, ls = self._leaf_times([Step((SeqGroup(1, int(c), batch),)) for c in self.ctx_grid])
            t, s = self._part(lt, ls, self._attn)
            self._check(t, ls, f"decode batches of {batch}")
            row = self._dec[batch] = (t, s)
            self._dec_split[batch] = self._split(lt, ls, self._attn)
        return row

    def is_mixed(self, dec_count: int, chunks: list[tuple[int, int]]) -> bool:
        """Whether a step's decodes are priced by the mixed-step row: a model is set, and a chunk has > 1 token."""
        return self.mixed is not None and dec_count > 0 and any(n > 1 for n, _ in chunks)

    def _decode_row_mixed(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """`_decode_row` for a step with a prefill chunk: each leaf's time × `mixed.multipliers`; the time added
        is labelled derived (the split puts it under DERIVED)."""
        row = self._dec_mixed.get(batch)
        if row is None:
            assert self.mixed is not None
            lt, ls = self._leaf_times([Step((SeqGroup(1, int(c), batch),)) for c in self.ctx_grid])
            mult = self.mixed.multipliers(batch, self.ctx_grid)
            t, s = self._part(lt * mult, ls, self._attn)
            self._check(t, ls, f"decode batches of {batch}")
            extra = (lt * (mult - 1.0))[self._attn].sum(axis=0)
            s = np.where(extra > 0, np.maximum(s, DERIVED), s).astype(np.int8)
            split = self._split(lt, ls, self._attn)
            split[DERIVED] += extra
            row = self._dec_mixed[batch] = (t, s)
            self._dec_mixed_split[batch] = split
        return row

    def _prefill_row(self, p_index: int) -> tuple[np.ndarray, np.ndarray]:
        row = self._pre.get(p_index)
        if row is None:
            p = int(self.ctx_grid[p_index])
            if p == 0:
                ns = self.n_grid.astype(np.int64)
                row = (self.A0[ns], self.A0_src[ns])
                self._pre_split[p_index] = self.A0_split[:, ns]
            else:
                lt, ls = self._leaf_times([Step((SeqGroup(int(n), p, 1),)) for n in self.n_grid])
                t, s = self._part(lt, ls, self._attn)
                self._check(t, ls, f"prefill chunks after {p} cached tokens")
                row = (t, s)
                self._pre_split[p_index] = self._split(lt, ls, self._attn)
            self._pre[p_index] = row
        return row

    def warm_decode_rows(self, batches) -> None:
        """Price the decode-attention rows of many batch sizes in one bulk call (the same rows `_decode_row` prices
        one call per batch size, which costs more when a simulation will ask for hundreds of them)."""
        todo = sorted({int(b) for b in batches if 1 <= int(b) <= self.max_seqs} - set(self._dec))
        if not todo:
            return
        n = len(self.ctx_grid)
        per = max(1, BULK_STEPS // n)  # batch sizes per call: the call's arrays stay bounded (search peak memory)
        for a in range(0, len(todo), per):
            some = todo[a:a + per]
            lt, ls = self._leaf_times([Step((SeqGroup(1, int(c), b),)) for b in some for c in self.ctx_grid])
            for k, b in enumerate(some):
                part = slice(k * n, (k + 1) * n)
                t, s = self._part(lt[:, part], ls[:, part], self._attn)
                self._check(t, ls[:, part], f"decode batches of {b}")
                self._dec[b] = (t, s)
                self._dec_split[b] = self._split(lt[:, part], ls[:, part], self._attn)

    def warm_prefill_rows(self, max_prefix: int) -> None:
        """Price the prefill-attention rows of every cached-prefix grid point up to `max_prefix` (and the next) in
        one bulk call: the rows chunked prompts use, which `_prefill_row` otherwise prices one call each."""
        g = self.ctx_grid
        last = min(int(np.searchsorted(g, max_prefix, side="right")), len(g) - 1)
        todo = [j for j in range(1, last + 1) if j not in self._pre]
        if not todo:
            return
        ns = self.n_grid
        per = max(1, BULK_STEPS // len(ns))
        for a in range(0, len(todo), per):
            some = todo[a:a + per]
            lt, ls = self._leaf_times([Step((SeqGroup(int(n), int(g[j]), 1),)) for j in some for n in ns])
            for k, j in enumerate(some):
                part = slice(k * len(ns), (k + 1) * len(ns))
                t, s = self._part(lt[:, part], ls[:, part], self._attn)
                self._check(t, ls[:, part], f"prefill chunks after {int(g[j])} cached tokens")
                self._pre[j] = (t, s)
                self._pre_split[j] = self._split(lt[:, part], ls[:, part], self._attn)

    def decode_attention_by_batch(self, ctx: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Decode attention of B sequences at context `ctx` for every B ≤ max_seqs (entry 0: none), exactly, in
        one bulk call (the search's steady-state path asks for many batch sizes at one context): times, worst
        sources, and the times split by leaf source (NUM_SOURCES rows)."""
        lt, ls = self._leaf_times([Step((SeqGroup(1, int(ctx), b),)) for b in range(1, self.max_seqs + 1)])
        t, s = self._part(lt, ls, self._attn, pad=True)
        self._check(t[1:], ls, f"decode batches at context {ctx}")
        return t, s, self._split(lt, ls, self._attn, pad=True)

    def meter(self) -> TableMeter:
        return TableMeter(self)

    # --- lookups -------------------------------------------------------------------------------
    def decode_attention(self, batch: int, ctx: float, mixed: bool = False) -> tuple[float, int]:
        t, s = self._decode_row_mixed(batch) if mixed else self._decode_row(batch)
        g = self.ctx_grid
        c = min(max(ctx, 0.0), g[-1])
        i = min(int(np.searchsorted(g, c, side="right")) - 1, len(g) - 2)
        f = (c - g[i]) / (g[i + 1] - g[i])
        return float(t[i] + f * (t[i + 1] - t[i])), int(max(s[i], s[i + 1]))

    def prefill_attention(self, n: int, p: int) -> tuple[float, int]:
        if p <= 0:
            return float(self.A0[n]), int(self.A0_src[n])
        g = self.ctx_grid
        pc = min(float(p), g[-1])
        j = min(int(np.searchsorted(g, pc, side="right")) - 1, len(g) - 2)
        fp = (pc - g[j]) / (g[j + 1] - g[j])
        ng = self.n_grid
        i = max(min(int(np.searchsorted(ng, n, side="right")) - 1, len(ng) - 2), 0)
        fn = (n - ng[i]) / (ng[i + 1] - ng[i]) if len(ng) > 1 else 0.0
        out, src = [], 0
        for pj in (j, j + 1):
            t, s = self._prefill_row(pj)
            out.append(t[i] + fn * (t[i + 1] - t[i]) if len(ng) > 1 else t[i])
            src = max(src, int(s[i]), int(s[min(i + 1, len(ng) - 1)]))
        return float(out[0] + fp * (out[1] - out[0])), src

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]:
        t = self.G[tokens] + self.H[seqs] + self.C
        src = max(int(self.G_src[tokens]), int(self.H_src[seqs]), self.C_src)
        if dec_count:
            a, s = self.decode_attention(dec_count, dec_ctx_mean, self.is_mixed(dec_count, chunks))
            t += a
            src = max(src, s)
        for n, p in chunks:
            a, s = self.prefill_attention(n, p)
            t += a
            src = max(src, s)
        return float(t), src

    def step_split_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                      chunks: list[tuple[int, int]]) -> np.ndarray:
        """`step_us` split by leaf source: µs per SOURCES code (the same lookups and interpolation weights on the
        tables split by source; sums to `step_us`'s time)."""
        out = self.G_split[:, tokens] + self.H_split[:, seqs] + self.C_split
        g = self.ctx_grid
        if dec_count:
            if self.is_mixed(dec_count, chunks):
                self._decode_row_mixed(dec_count)
                sp = self._dec_mixed_split[dec_count]
            else:
                self._decode_row(dec_count)
                sp = self._dec_split[dec_count]
            c = min(max(dec_ctx_mean, 0.0), g[-1])
            i = min(int(np.searchsorted(g, c, side="right")) - 1, len(g) - 2)
            f = (c - g[i]) / (g[i + 1] - g[i])
            out = out + sp[:, i] * (1.0 - f) + sp[:, i + 1] * f
        ng = self.n_grid
        for n, p in chunks:
            if p <= 0:
                out = out + self.A0_split[:, n]
                continue
            pc = min(float(p), g[-1])
            j = min(int(np.searchsorted(g, pc, side="right")) - 1, len(g) - 2)
            fp = (pc - g[j]) / (g[j + 1] - g[j])
            i = max(min(int(np.searchsorted(ng, n, side="right")) - 1, len(ng) - 2), 0)
            fn = (n - ng[i]) / (ng[i + 1] - ng[i]) if len(ng) > 1 else 0.0
            for pj, wp in ((j, 1.0 - fp), (j + 1, fp)):
                self._prefill_row(pj)
                sp = self._pre_split[pj]
                out = out + wp * (sp[:, i] * (1.0 - fn) + (sp[:, i + 1] * fn if len(ng) > 1 else 0.0))
        return out

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Times of k decode iterations of `batch` sequences whose mean context starts at ctx_mean0."""
        t, s = self._decode_row(batch)
        g = self.ctx_grid
        c = ctx_mean0 + np.arange(k, dtype=np.float64)
        if c[0] < 0 or c[-1] > g[-1]:
            c = np.clip(c, 0.0, g[-1])
        base = self.G[batch] + self.H[batch] + self.C
        floor = max(int(self.G_src[batch]), int(self.H_src[batch]), self.C_src)
        lo, hi = int(s.min()), int(s.max())
        if lo == hi:  # one source along the whole row (e.g. all roofline)
            return base + np.interp(c, g, t), np.full(k, max(lo, floor), dtype=np.int8)
        i = np.clip(np.searchsorted(g, c, side="right") - 1, 0, len(g) - 2)
        src = np.maximum(np.maximum(s[i], s[i + 1]), floor).astype(np.int8)
        return base + np.interp(c, g, t), src


class TableMeter:
    """Kernel-level source shares for a `TreeCost`: records how much weight each committed iteration put on each
    table entry (the same indices and interpolation weights `TreeCost` uses), and resolves them against the tables
    split by leaf source at the end. Sum over sources = sum of the iteration times (up to rounding).

    The simulator calls it once per iteration or decode segment, so a call only appends its arguments to flat
    buffers; every `FLUSH` entries they become table weights in one vectorised pass (memory stays bounded)."""

    basis = "kernel"
    FLUSH = 1 << 16  # buffered numbers before a vectorised pass

    def __init__(self, cost: TreeCost) -> None:
        self.cost = cost
        self.iterations = 0
        self.tokens = np.zeros(cost.max_tokens + 1)  # iterations by tokens (G), by sequences (H)
        self.seqs = np.zeros(cost.max_seqs + 1)
        self.a0 = np.zeros(cost.max_tokens + 1)  # prefill chunks without a cached prefix, by tokens
        self.dec_w = np.zeros((cost.max_seqs + 1, len(cost.ctx_grid)))  # batch × ctx_grid weights
        self.dec_mixed_w = np.zeros_like(self.dec_w)  # the same for decodes in steps with a prefill chunk
        self.pre_w = np.zeros((len(cost.ctx_grid), len(cost.n_grid)))  # prefix grid index × n_grid weights
        self._steps = array("d")  # (tokens, sequences, decode count, mean decode context, mixed) per iteration
        self._runs = array("d")  # (batch, first mean context, iterations) per decode segment
        self._chunks = array("d")  # (tokens, cached prefix) per prefill chunk

    def step(self, us: float, source: int, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
             chunks: list[tuple[int, int]]) -> None:
        self._steps.extend((tokens, seqs, dec_count, dec_ctx_mean, float(self.cost.is_mixed(dec_count, chunks))))
        for chunk in chunks:
            self._chunks.extend(chunk)
        if len(self._steps) > self.FLUSH:
            self._flush()

    def run(self, times_us: np.ndarray, sources: np.ndarray, batch: int, ctx_mean0: float) -> None:
        self._runs.extend((batch, ctx_mean0, len(times_us)))
        if len(self._runs) > self.FLUSH:
            self._flush()

    def _flush(self) -> None:
        g, ng = self.cost.ctx_grid, self.cost.n_grid
        lg, lng = len(g), len(ng)
        steps = np.frombuffer(self._steps).reshape(-1, 5)
        runs = np.frombuffer(self._runs).reshape(-1, 3)
        st_tok, st_seq, st_dec = (steps[:, c].astype(np.int64) for c in range(3))
        rb, ks = runs[:, 0].astype(np.int64), runs[:, 2].astype(np.int64)
        self.iterations += len(steps) + int(ks.sum())
        self.tokens += np.bincount(st_tok, minlength=len(self.tokens)) + np.bincount(rb, ks, len(self.tokens))
        self.seqs += np.bincount(st_seq, minlength=len(self.seqs)) + np.bincount(rb, ks, len(self.seqs))
        # decode attention: single steps with decodes, and every iteration of every segment (context + 1 each)
        dec = st_dec > 0
        starts = np.repeat(np.cumsum(ks) - ks, ks)
        run_c = np.repeat(runs[:, 1], ks) + (np.arange(int(ks.sum())) - starts)
        b = np.concatenate([st_dec[dec], np.repeat(rb, ks)])
        c = np.clip(np.concatenate([steps[dec, 3], run_c]), 0.0, g[-1])  # as TreeCost.decode_attention
        i = np.minimum(np.searchsorted(g, c, side="right") - 1, lg - 2)
        f = (c - g[i]) / (g[i + 1] - g[i])
        mixed = np.concatenate([steps[dec, 4] > 0, np.zeros(int(ks.sum()), dtype=bool)])
        for w, sel in ((self.dec_w, ~mixed), (self.dec_mixed_w, mixed)):
            flat = w.reshape(-1)
            flat += np.bincount(b[sel] * lg + i[sel], weights=1.0 - f[sel], minlength=flat.size)
            flat += np.bincount(b[sel] * lg + i[sel] + 1, weights=f[sel], minlength=flat.size)
        ch = np.frombuffer(self._chunks).reshape(-1, 2)
        fresh = ch[:, 1] <= 0
        self.a0 += np.bincount(ch[fresh, 0].astype(np.int64), minlength=len(self.a0))
        ch = ch[~fresh]
        if len(ch):  # as TreeCost.prefill_attention: bilinear in (cached prefix, chunk tokens)
            n, pc = ch[:, 0], np.minimum(ch[:, 1], g[-1])
            j = np.minimum(np.searchsorted(g, pc, side="right") - 1, lg - 2)
            fp = (pc - g[j]) / (g[j + 1] - g[j])
            ii = np.maximum(np.minimum(np.searchsorted(ng, n, side="right") - 1, lng - 2), 0)
            fn = (n - ng[ii]) / (ng[ii + 1] - ng[ii]) if lng > 1 else np.zeros(len(n))
            pflat = self.pre_w.reshape(-1)
            for jj, wp in ((j, 1.0 - fp), (j + 1, fp)):
                pflat += np.bincount(jj * lng + ii, weights=wp * (1.0 - fn), minlength=pflat.size)
                if lng > 1:
                    pflat += np.bincount(jj * lng + ii + 1, weights=wp * fn, minlength=pflat.size)
        self._steps, self._runs, self._chunks = array("d"), array("d"), array("d")

    def source_us(self) -> np.ndarray:
        self._flush()
        c = self.cost
        out = c.C_split * self.iterations + c.G_split @ self.tokens + c.H_split @ self.seqs + c.A0_split @ self.a0
        for b in np.flatnonzero(self.dec_w.any(axis=1)):
            c._decode_row(int(b))
            out = out + c._dec_split[int(b)] @ self.dec_w[b]
        for b in np.flatnonzero(self.dec_mixed_w.any(axis=1)):
            c._decode_row_mixed(int(b))
            out = out + c._dec_mixed_split[int(b)] @ self.dec_mixed_w[b]
        for j in np.flatnonzero(self.pre_w.any(axis=1)):
            c._prefill_row(int(j))
            out = out + c._pre_split[int(j)] @ self.pre_w[j]
        return out


class MemoCost:
    """Exact evaluation of every distinct step through the tree (any tree), memoised."""

    def __init__(self, tree: CompiledTree, pricer: KernelPricer, dtypes: Dtypes, quantum: int = 16) -> None:
        self.tree, self.pricer, self.dtypes, self.quantum = tree, pricer, dtypes, quantum
        self._memo: dict[tuple, tuple[float, int]] = {}
        self.evaluations = 0

    def _steps(self, dec_count: int, ctx: float, chunks: list[tuple[int, int]]) -> Step:
        groups = [SeqGroup(n, p, 1) for n, p in chunks]
        if dec_count:
            groups.append(SeqGroup(1, int(round(ctx / self.quantum) * self.quantum), dec_count))
        return Step(tuple(groups))

    def _eval(self, steps: list[Step]) -> tuple[np.ndarray, np.ndarray]:
        ev = self.tree.evaluate(steps, self.pricer, self.dtypes)
        self.evaluations += len(steps)
        t = ev.total_us()
        s = ev.node_source[self.tree.root]
        if np.isnan(t).any():
            raise MissingTimingError(f"iteration time missing: no data for {_missing_names(self.tree, ev.leaf_source)};"
                                     " import measured rows (--profile)")
        return t, s

    def step_us(self, tokens: int, seqs: int, dec_count: int, dec_ctx_mean: float,
                chunks: list[tuple[int, int]]) -> tuple[float, int]:
        key = (dec_count, round(dec_ctx_mean / self.quantum), tuple(chunks))
        hit = self._memo.get(key)
        if hit is None:
            t, s = self._eval([self._steps(dec_count, dec_ctx_mean, chunks)])
            hit = self._memo[key] = (float(t[0]), int(s[0]))
        return hit

    def decode_run_us(self, batch: int, ctx_mean0: float, k: int) -> tuple[np.ndarray, np.ndarray]:
        t, s = self._eval([self._steps(batch, ctx_mean0 + j, []) for j in range(k)])
        return t, s.astype(np.int8)


def iteration_cost(tree: CompiledTree, pricer: KernelPricer, dtypes: Dtypes, max_tokens: int, max_seqs: int,
                   max_context: int) -> TreeCost | MemoCost:
    if is_additive(tree):
        return TreeCost(tree, pricer, dtypes, max_tokens, max_seqs, max_context)
    return MemoCost(tree, pricer, dtypes)


def source_name(code: int) -> str:
    return SOURCES[int(code)].value
