"""The config-only work accountant (`graphsim.work`).

From a config.json and a workload alone it says how much work a model must do: FLOPs, parameter
bytes, KV/state bytes read and written, and parameter counts, per semantic segment
(`layers[sliding].attn.qkv`, `layers[moe].ffn.routed`, …). It never looks at graphs, kernels,
cost trees or captures (DESIGN §5, rule 9), and it imports neither torch nor the importers.

    from graphsim.work import accounting, parse_step
    acc = accounting(config_dict)
    report = acc.step(parse_step(prefill=["8192@0"], decode=["256x4096"]))
    params = acc.params()
"""

from graphsim.work.account import account_step, count_params
from graphsim.work.api import Accounting, accounting, resolve_precision
from graphsim.work.dtypes import DType, Precision, parse_dtype
from graphsim.work.registry import BUILDERS, build_model, supported_architectures
from graphsim.work.report import ParamReport, SegmentParams, SegmentWork, WorkReport
from graphsim.work.specs import ModelSpec
from graphsim.workload import SeqGroup, Step, WorkloadError, parse_decode, parse_prefill, parse_step

__all__ = [
    "BUILDERS",
    "Accounting",
    "DType",
    "ModelSpec",
    "ParamReport",
    "Precision",
    "SegmentParams",
    "SegmentWork",
    "SeqGroup",
    "Step",
    "WorkReport",
    "WorkloadError",
    "account_step",
    "accounting",
    "build_model",
    "count_params",
    "parse_decode",
    "parse_dtype",
    "parse_prefill",
    "parse_step",
    "resolve_precision",
    "supported_architectures",
]
