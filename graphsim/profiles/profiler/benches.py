"""Pick the benchmark for a profile.db key."""

from __future__ import annotations

from typing import Any

from graphsim.costing.kernels import (
    AttentionDecodeKey, AttentionPrefillKey, CollectiveKey, ElementwiseKey, GemmKey, MlaDecodeKey, MlaPrefillKey,
    MoeKey,
)
from graphsim.profiles.profiler.base import KernelBench
from graphsim.profiles.profiler.device import DeviceInfo, Unmeasurable
from graphsim.profiles.profiler.targets import KernelTarget


def make_bench(target: KernelTarget, info: DeviceInfo) -> KernelBench[Any]:
    """The benchmark of `target` on `info`'s device (allocates its weights); `Unmeasurable` if none."""
    key, attrs = target.key, target.attrs
    if isinstance(key, GemmKey):
        from graphsim.profiles.profiler.gemm import GemmBench

        return GemmBench(key, attrs, info)
    if isinstance(key, (AttentionPrefillKey, AttentionDecodeKey, MlaPrefillKey, MlaDecodeKey)):
        from graphsim.profiles.profiler.attention import AttentionBench

        return AttentionBench(key, attrs, info)
    if isinstance(key, MoeKey):
        from graphsim.profiles.profiler.moe import MoeBench

        return MoeBench(key, attrs, info)
    if isinstance(key, ElementwiseKey):
        from graphsim.profiles.profiler.pointwise import PointwiseBench

        return PointwiseBench(key, attrs, info)
    if isinstance(key, CollectiveKey):
        raise Unmeasurable("collectives are not timed by the profiler")
    raise Unmeasurable(f"no benchmark for {key.KIND.value} rows")
