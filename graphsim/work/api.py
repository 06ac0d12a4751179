"""Entry points: resolve a model, choose the precision, account a step or count parameters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphsim.work.account import account_step, count_params
from graphsim.work.dtypes import Precision, parse_dtype
from graphsim.work.registry import build_model
from graphsim.work.report import ParamReport, WorkReport
from graphsim.work.specs import ModelSpec
from graphsim.workload import Step


@dataclass(frozen=True)
class Accounting:
    """A built model with the precision it is accounted in."""

    spec: ModelSpec
    precision: Precision

    def step(self, step: Step) -> WorkReport:
        return account_step(self.spec, step, self.precision)

    def params(self) -> ParamReport:
        return count_params(self.spec, self.precision)


def resolve_precision(
    spec: ModelSpec,
    dtype: str | None = None,
    kv_dtype: str | None = None,
    state_dtype: str | None = None,
    ignore_quant: bool = False,
) -> Precision:
    """Config dtypes unless overridden. `dtype` sets the parameters (outside the checkpoint's
    quantization) and, unless given separately, the KV cache and recurrent state."""
    weight = parse_dtype(dtype, "--dtype") if dtype else spec.dtype
    source = "--dtype" if dtype else spec.dtype_source
    quant = None if ignore_quant else spec.quant
    # a checkpoint that ships an fp8 KV cache (kv_cache_quant_algo / kv_cache_scheme) sets the KV dtype
    # unless the user names one (graphsim.quantization)
    kv_default = parse_dtype(quant.kv_dtype, "kv_cache_quant_algo") if quant and quant.kv_dtype else weight
    return Precision(
        weight=weight,
        kv=parse_dtype(kv_dtype, "--kv-dtype") if kv_dtype else kv_default,
        kv_source="--kv-dtype" if kv_dtype else "checkpoint" if quant and quant.kv_dtype else "parameter dtype",
        state=parse_dtype(state_dtype, "--state-dtype") if state_dtype else weight,
        quant=quant,
        weight_source=source,
    )


def accounting(
    cfg: dict[str, Any],
    dtype: str | None = None,
    kv_dtype: str | None = None,
    state_dtype: str | None = None,
    ignore_quant: bool = False,
) -> Accounting:
    """Build the spec of a config dict and fix its precision."""
    spec = build_model(cfg)
    return Accounting(spec, resolve_precision(spec, dtype, kv_dtype, state_dtype, ignore_quant))
