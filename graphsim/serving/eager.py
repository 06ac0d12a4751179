"""Steps vLLM runs without a CUDA graph: their kernels are dispatched one by one from the host.

vLLM V1 replays a CUDA graph for a step of at most `max_cudagraph_capture_size` tokens, by default
min(max_num_seqs × 2, 512) bounded by max_num_batched_tokens (vllm/config/vllm.py `_set_cudagraph_sizes`, v0.10.1
and v0.19.0 alike; `costing.collectives.CollectiveSettings.for_engine`); a larger step — a prefill chunk of more
than 512 tokens, or more than 512 decoding sequences — runs with CUDAGraphMode.NONE
(vllm/v1/cudagraph_dispatcher.py `CudagraphDispatcher.dispatch`): the compiled model's Python issues every kernel
of the step itself. The profile's kernel rows are graphed times, which leave that dispatch out, so such a step is
floored by its dispatch:

    eager_cpu_us = launches × dispatch_us            (tokens > max_cudagraph_tokens, else 0)

- `launches`: the kernels of one step of the model on one rank, as graphsim's fused graph has them (the cost
  tree's leaves × their multiplicity), plus one per FlashAttention kernel for its KV-cache write: vLLM launches
  `reshape_and_cache_flash` apart from the attention kernel (inside `FlashAttentionImpl.forward` in 0.10.1; its own
  `do_kv_cache_update` since vllm-project/vllm PR 25954, vllm/v1/attention/backends/flash_attn.py at v0.19.0), and
  the fused graph's attention kernel stands for both.
- `dispatch_us`: what the profile measured one vLLM op to cost when dispatched from Python with no CUDA graph: the
  smallest `vllm_custom_eager` all-reduce row (aiconfigurator collector/collect_all_reduce.py
  `benchmark_vllm_allreduce`, eager mode: a loop of `tensor_model_parallel_all_reduce(input.clone())` calls timed
  with CUDA events, at messages of a few hundred bytes, where the GPU work is the 4–5 µs of the same call replayed
  in a CUDA graph). H100 (h100_sxm, vLLM rows): 19.68 µs eager against 4.18 µs graphed at 256 B; H200 20.30 /
  4.38; A100 43.58 / 4.85. One such call is a clone and an all-reduce op; a step's kernel is priced as one call,
  so the floor is a lower bound of the dispatch (vLLM's attention op also goes through Python for its metadata
  and its KV-cache write).

How the floor combines with the GPU time and the engine's other host time is the host model's
(`host.EngineHost.iteration_us`): with async scheduling the dispatch is host work done for the step, max(gpu,
host + eager_cpu); without it max(gpu, eager_cpu) + host. Steps inside the capture bound are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from graphsim.costing.profile_db import ProfileDB

# aiconfigurator's implementation name of vLLM's all-reduce timed without a CUDA graph (costing/collectives.py)
EAGER_ROWS = "vllm_custom_eager"


@dataclass(frozen=True)
class EagerDispatch:
    """The host dispatch of a step run without a CUDA graph (see the module docstring)."""

    max_graph_tokens: int  # the largest step vLLM replays in a CUDA graph (0: every step eager)
    launches: int  # kernels in one step on one rank
    dispatch_us: float  # host time to dispatch one of them
    source: str  # where dispatch_us comes from

    def cpu_us(self, tokens) -> Any:  # float for a scalar, ndarray for an array (as EngineHost.iteration_us)
        """Host time to dispatch a step of `tokens` tokens (scalar or array): 0 inside the capture bound."""
        cost = self.launches * self.dispatch_us
        if isinstance(tokens, np.ndarray):
            return np.where(tokens > self.max_graph_tokens, cost, 0.0)
        return cost if tokens > self.max_graph_tokens else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"max_graph_tokens": self.max_graph_tokens, "launches": self.launches,
                "dispatch_us": self.dispatch_us, "eager_step_us": self.launches * self.dispatch_us,
                "source": self.source}


def eager_dispatch_us(db: ProfileDB) -> tuple[float, str] | None:
    """The smallest `vllm_custom_eager` row of `db` and what it is; None when the profile has none."""
    from graphsim.costing.kernels import CollectiveKey, TableKind

    best: tuple[float, int, int] | None = None
    for key in db.keys(TableKind.COLLECTIVE):
        if not isinstance(key, CollectiveKey) or key.implementation != EAGER_ROWS:
            continue
        rows = db.rows(key)
        if not len(rows):
            continue
        i = int(np.argmin(rows.times_us))
        t = float(rows.times_us[i])
        if best is None or t < best[0]:
            best = (t, int(rows.coords[i, 0]), key.num_gpus)
    if best is None:
        return None
    t, size, gpus = best
    return t, (f"the profile's smallest {EAGER_ROWS} row: one vLLM all-reduce call dispatched from Python without "
               f"a CUDA graph, {t:.2f} µs ({size:,} B, {gpus} GPUs; aiconfigurator collect_all_reduce.py)")


def eager_dispatch(cost: Any, max_graph_tokens: int) -> EagerDispatch | None:
    """The dispatch floor of `cost`'s steps above `max_graph_tokens` (an iteration cost with a `tree` and a
    `pricer`, pricing.TreeCost / MemoCost); None when the cost has no tree or its profile no eager rows."""
    tree, pricer = getattr(cost, "tree", None), getattr(cost, "pricer", None)
    db = getattr(pricer, "db", None)
    if tree is None or db is None:
        return None
    found = eager_dispatch_us(db)
    if found is None:
        return None
    from graphsim.serving.kv_write import is_flash_attention

    mult = np.asarray(tree.multiplicity, dtype=np.float64)
    writes = [i for i, lf in enumerate(getattr(tree, "leaves", ())) if is_flash_attention(lf.attrs)]
    launches = int(round(float(mult.sum() + mult[writes].sum())))
    return EagerDispatch(max_graph_tokens, launches, found[0], found[1])
