"""CPU time vLLM V1's sampler spends on penalties each step: the running requests' output tokens made a padded tensor.

    <a venv with vLLM>/bin/python benchmarks/host_penalties.py [--batches 1,32,128,256] [--lengths 128,512,1024]

When any request of a step has a repetition, presence or frequency penalty (a request's own, or the server's default
from the model's generation_config.json under `--generation-config auto`), vLLM V1's `Sampler.apply_penalties` calls
`apply_all_penalties` (vllm/v1/sample/ops/penalties.py, v0.10.1), whose `_convert_to_tensors` turns the step's
`output_token_ids` (a Python list per request) into one int64 tensor with `make_tensor_with_pad` on the CPU, then
copies it to the GPU. The CPU part grows with the batch × the tokens each request has generated so far. This script
times vLLM's own `_convert_to_tensors` (device "cpu", so no copy) on random token lists, thread CPU time, median of
`--repeats`, and fits one cost per element (least squares through the origin over the grid). Without a GPU the
pinned-memory copy it makes on a GPU host is skipped, so the figure is a floor.

It measures; graphsim does not use it (docs/serving.md names it as a candidate for what the fitted per-sequence host
time absorbed). Run on this project's 2-core VM under load ~9 with vLLM 0.10.1 (/tmp/h5_venv), the default grid:
19.2 ns an element (256 × 512: 2.72 ms; 17.4–25.9 ns an element from 512 elements up, 58 ns at 1 × 128).
"""

# pyright: reportMissingImports=false
# (vLLM is not a dependency of graphsim: the script runs under a venv that has it)
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence


def per_element_ns(points: Sequence[tuple[int, float]]) -> float:
    """Least-squares slope through the origin of (elements, µs) points, in ns an element."""
    num = sum(n * us for n, us in points)
    den = sum(n * n for n, _ in points)
    return num / den * 1e3


def time_convert(convert: Callable[[list[list[int]]], object], batch: int, length: int, vocab: int,
                 repeats: int, rng: random.Random) -> float:
    """Median thread CPU µs of one call on `batch` lists of `length` random token ids."""
    x = [[rng.randrange(vocab) for _ in range(length)] for _ in range(batch)]
    ts = []
    for _ in range(repeats):
        t0 = time.thread_time()
        convert(x)
        ts.append(time.thread_time() - t0)
    return statistics.median(ts) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--batches", default="1,32,128,256")
    ap.add_argument("--lengths", default="128,512,1024")
    ap.add_argument("--vocab", type=int, default=151_936, help="pad value and id range (Qwen's vocabulary)")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    try:
        import torch
        import vllm
        from vllm.v1.sample.ops import penalties
    except ImportError as e:
        print(f"needs vLLM (run with a venv that has it): {e}", file=sys.stderr)
        return 2
    # No GPU here: the pinned-memory copy `make_tensor_with_pad` makes on a GPU host is skipped (an undercount)
    penalties.is_pin_memory_available = lambda: False
    _convert_to_tensors = penalties._convert_to_tensors
    cpu = torch.device("cpu")

    def convert(x: list[list[int]]) -> object:
        return _convert_to_tensors(x, args.vocab, cpu)

    rng = random.Random(0)
    points = []
    print(f"vLLM {vllm.__version__}: _convert_to_tensors, thread CPU time, median of {args.repeats}")
    for b in (int(v) for v in args.batches.split(",")):
        for length in (int(v) for v in args.lengths.split(",")):
            us = time_convert(convert, b, length, args.vocab, args.repeats, rng)
            points.append((b * length, us))
            print(f"  batch {b:4d} × {length:5d} tokens: {us:9.1f} µs ({us * 1e3 / (b * length):.1f} ns an element)")
    print(f"fit: {per_element_ns(points):.1f} ns an element (batch × tokens generated so far)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
