"""The GPU time of vLLM V1's sampler when the requests sample at random (temperature > 0), with top-k / top-p.

vLLM's `Sampler.forward` (vllm/v1/sample/sampler.py, v0.19.0) runs outside the step's CUDA graph, on every
scheduled row: the logits to fp32, then either the greedy argmax (temperature 0: what `host.HostModel.sample_us`
prices, a roofline of its bytes) or, for random sampling, the temperature divide, the top-k / top-p filter
(`TopKTopPSampler.forward_native`, the default since FlashInfer's sampler is opt-in through
VLLM_USE_FLASHINFER_SAMPLER), a softmax, `random_sample`'s exponential draw and divide, and the argmax. The filter is
`apply_top_k_top_p` (vllm/v1/sample/ops/topk_topp_sampler.py): from 8 rows the Triton `_topk_topp_kernel` (one
program a row), below 8 rows PyTorch's full sort of the vocabulary, a softmax and a cumulative sum (one block a row),
and a scatter back.

Which requests sample at random is the client's and the server's business, not the model's: vLLM's API server fills
the sampling parameters a request leaves out from the model's generation_config.json (`--generation-config auto`),
and `vllm bench serve` stopped sending temperature 0 in vllm-project/vllm PR 32723 (merged 2026-01-20; its
vllm/benchmarks/serve.py at v0.19.0 prints "vllm bench serve no longer sets temperature==0 (greedy)"). A model whose
generation_config asks for top-k / top-p (Qwen3: temperature 0.6, top_k 20, top_p 0.95) then pays this path on every
step of such a benchmark. `Sampling` says what the requests ask for; the default is greedy (graphsim's behaviour
before this module).

Times are MEASURED, from a public Nsight Systems trace of vLLM 0.19 serving Qwen3-0.6B (vocabulary 151,936) on one
H100 80GB HBM3 with `vllm bench serve` (random 512 in / 128 out, no --temperature): ovg-project/kvcached,
benchmarks/bench_layout/nsys_runs/layout_true.sqlite (commit 4a8176e; kvcached on, which changes where the KV cache
lives, not the sampler). Each decode step there launches, after the logits GEMM, the cast, the temperature divide,
`_topk_topp_kernel`, `cunn_SoftMaxForward`, the exponential draw, the divide and the argmax (`reduce_kernel`). The
sampler's span on the GPU (end of the logits GEMM to end of the argmax, launch gaps included), median over the
trace's graphed decode steps:

- 50 rows: 488.1 µs (119 steps), of which `_topk_topp_kernel` 293.3 µs (120 launches);
- 100 rows: 701.1 µs (31 steps), of which `_topk_topp_kernel` 346.1 µs (32 launches);
- 3 rows (PyTorch sort path, 40 kernels): 514.5 µs (the one such step; a 4-row step's kernels sum to 471.2 µs).

So from 8 rows the sampler is a line through the two medians: without the filter (span − `_topk_topp_kernel`)
194.8 µs at 50 rows and 355.0 at 100, i.e. 34.6 + 3.204 µs a row; the filter adds 240.5 + 1.056 µs a row; together
275.1 + 4.260 µs a row (the trace's 19-, 44- and 56-row steps: 335.4 / 460.1 / 519.4 measured, 356.0 / 462.5 / 513.7
by the line). Below 8 rows the filter's sort path is priced at the 3-row step's 514.5 µs whatever the rows: its large
kernels (the cumulative sum 190 µs, two softmaxes of 64 µs) run one block a row. Without the filter the line is
used below 8 rows too (not measured there). Rows past 100 are the line extrapolated.

Another GPU or vocabulary scales these times by (vocab / 151,936) × (H100's 3.35 TB/s / the GPU's memory
bandwidth): every kernel here streams the rows' logits, but the Triton filter and the one-block-a-row kernels are not
bandwidth-bound, so this is an assumption, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from graphsim.errors import GraphsimError


class SamplingError(GraphsimError):
    pass


SAMPLING_EPS = 1e-5  # vllm/sampling_params.py `_SAMPLING_EPS`: a lower temperature is greedy
TRITON_FILTER_MIN_ROWS = 8  # apply_top_k_top_p: `HAS_TRITON and logits.shape[0] >= 8` takes the Triton kernel

# The trace (module docstring): vocabulary and GPU it was taken on
TRACE_VOCAB = 151_936
TRACE_GPU = "h100_sxm"  # H100 SXM 80GB HBM3: its bandwidth is read from graphsim's spec (trace_bandwidth())
# Medians of the trace, µs
SPAN_50, SPAN_100 = 488.1, 701.1  # sampler span at 50 and 100 rows
FILTER_50, FILTER_100 = 293.3, 346.1  # _topk_topp_kernel at 50 and 100 rows
SORT_PATH_US = 514.5  # the 3-row step's span (PyTorch sort path)

RANDOM_PER_ROW_US = ((SPAN_100 - FILTER_100) - (SPAN_50 - FILTER_50)) / 50  # 3.204
RANDOM_BASE_US = (SPAN_50 - FILTER_50) - 50 * RANDOM_PER_ROW_US  # 34.6
FILTER_PER_ROW_US = (FILTER_100 - FILTER_50) / 50  # 1.056
FILTER_BASE_US = FILTER_50 - 50 * FILTER_PER_ROW_US  # 240.5


@dataclass(frozen=True)
class Sampling:
    """What the requests ask the sampler for (vLLM's SamplingParams after the server's defaults)."""

    temperature: float = 0.0
    top_k: int = 0  # 0 or -1: off (vLLM)
    top_p: float = 1.0  # 1.0: off
    source: str = "greedy (temperature 0)"

    @property
    def greedy(self) -> bool:
        return self.temperature < SAMPLING_EPS

    @property
    def filters(self) -> bool:
        """Random sampling with top-k and/or top-p (SamplingParams turns both off at temperature 0)."""
        return not self.greedy and (self.top_k > 0 or self.top_p < 1.0)

    def to_json(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p, "source": self.source}


GREEDY = Sampling()


@dataclass(frozen=True)
class RandomSampler:
    """GPU time of vLLM V1's random-sampling path for a step's rows (see the module docstring)."""

    filters: bool  # top-k / top-p on
    scale: float  # (vocab / TRACE_VOCAB) × (the trace GPU's bandwidth / the GPU's bandwidth)

    def us(self, rows) -> Any:
        """µs of sampling `rows` rows (scalar or numpy array); 0 rows: 0."""
        r = np.asarray(rows, dtype=np.float64)
        t = RANDOM_BASE_US + RANDOM_PER_ROW_US * r
        if self.filters:
            t = np.where(r >= TRITON_FILTER_MIN_ROWS, t + FILTER_BASE_US + FILTER_PER_ROW_US * r, SORT_PATH_US)
        t = np.where(r > 0, t * self.scale, 0.0)
        return float(t) if np.ndim(t) == 0 else t

    def to_json(self) -> dict[str, Any]:
        return {"path": "random, top-k/top-p" if self.filters else "random", "scale": self.scale,
                "source": "measured: vLLM 0.19 on H100, Qwen3-0.6B (ovg-project/kvcached nsys trace, layout_true)"
                          + ("" if self.scale == 1.0 else "; scaled by vocabulary and memory bandwidth (assumed)")}


FIRST_TRITON_FILTER = (0, 19, 0)  # topk_topp_triton.py: in 0.19.0 and 0.33.0, absent in 0.10.1 (first inspected)


def check_engine(sampling: Sampling | None, profile: Any) -> None:
    """Refuse, in one line, random sampling on an engine whose sampler graphsim has not measured: SGLang and
    TensorRT-LLM, vLLM's V0, and top-k / top-p before the Triton filter (vLLM 0.10.1's `apply_top_k_top_p` sorts the
    vocabulary at every batch size). `profile`: an EngineProfile (engine_versions.py); None: not checked."""
    if sampling is None or sampling.greedy or profile is None:
        return
    if not profile.is_vllm or profile.family == "v0":
        raise SamplingError(f"--temperature > 0 on {profile.name}: graphsim has measured only vLLM V1's sampler "
                            "(serving/sampler.py); give --temperature 0 (greedy) or a vLLM V1 --engine")
    if sampling.filters and profile.version < FIRST_TRITON_FILTER:
        raise SamplingError(f"--top-k/--top-p on {profile.name}: its sampler sorts the whole vocabulary at every batch "
                            "size, which graphsim has not measured (measured: vLLM 0.19's Triton filter); drop them or "
                            "give --engine vllm==0.19 or newer")


def random_sampler(sampling: Sampling | None, vocab: int, bandwidth_bytes_per_s: float) -> RandomSampler | None:
    """The random-sampling path's cost for a deployment, or None when the requests are greedy (the roofline of
    `host.HostModel.sample_us` then applies)."""
    if sampling is None or sampling.greedy or vocab <= 0 or bandwidth_bytes_per_s <= 0:
        return None
    return RandomSampler(sampling.filters, vocab / TRACE_VOCAB * trace_bandwidth() / bandwidth_bytes_per_s)


def trace_bandwidth() -> float:
    """Memory bandwidth of the GPU the trace was taken on, bytes/s, from graphsim's spec of it."""
    from graphsim.costing.hardware import load_hardware

    return load_hardware(TRACE_GPU).memory_bandwidth_bytes_per_s


def parse_sampling(temperature: float | None, top_k: int | None, top_p: float | None) -> Sampling | None:
    """`vllm bench serve`'s --temperature / --top-k / --top-p as the requests send them; None when none is given
    (greedy, as `vllm bench serve` sent before vllm-project/vllm PR 32723). Top-k / top-p without a temperature:
    vLLM's default temperature 1.0 (SamplingParams)."""
    if temperature is None and top_k is None and top_p is None:
        return None
    t = 1.0 if temperature is None else temperature
    k = 0 if top_k is None else top_k
    p = 1.0 if top_p is None else top_p
    if t < 0:
        raise SamplingError(f"--temperature {t}: must be >= 0 (0: greedy)")
    if k < -1:
        raise SamplingError(f"--top-k {k}: must be -1 or 0 (off) or a positive number of tokens")
    if not 0.0 < p <= 1.0:
        raise SamplingError(f"--top-p {p}: must be in (0, 1] (1: off)")
    return Sampling(t, k, p, "given: --temperature / --top-k / --top-p")


def with_sampling(setup: Any, sampling: Sampling | None, vocab: int, bandwidth_bytes_per_s: float) -> Any:
    """`setup` (a SimulationSetup, or a DP setup holding one as `ranks`) whose engines sample as `sampling` asks:
    random sampling's kernels in their iterations (unchanged for greedy requests)."""
    sampler = random_sampler(sampling, vocab, bandwidth_bytes_per_s)
    if sampler is None:
        return setup
    engine = getattr(setup, "engine", None)
    check_engine(sampling, getattr(engine, "profile", None))
    if hasattr(setup, "ranks"):
        return replace(setup, ranks=with_sampling(setup.ranks, sampling, vocab, bandwidth_bytes_per_s))
    host = getattr(setup, "host", None)
    if host is None:
        raise SamplingError("--temperature prices vLLM's sampler with the engine's host and sampling time; "
                            "drop --no-host-time to simulate random sampling")
    return replace(setup, host=replace(host, sampler=sampler))
