"""Trace a meta-device model with torch.export (non-strict) and a dynamic token dimension."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass

import sympy
import torch

# Sizes used when a dynamic token dimension cannot be exported: the trace is static at a
# prime token count and dims equal to it are read back as T (checked against a second prime).
STATIC_PROBE_TOKENS = (131, 137)


@dataclass
class Traced:
    program: torch.export.ExportedProgram
    token_symbols: dict[sympy.Symbol, sympy.Expr]
    dynamic: bool


class _Forward(torch.nn.Module):
    """Calls the LM with input_ids only, no cache: one prefill step of T tokens."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, use_cache=False, return_dict=False)[0]


def _export(model: torch.nn.Module, tokens: int, dynamic: bool) -> torch.export.ExportedProgram:
    ids = torch.zeros((1, tokens), dtype=torch.long, device="meta")
    shapes = {"input_ids": {1: torch.export.Dim("T", min=2, max=1 << 22)}} if dynamic else None
    # torch logs a failing meta kernel's traceback at ERROR (fake_tensor.py); the failure itself reaches graphsim as
    # an exception, which the importer turns into one line naming the mechanism
    logging.getLogger("torch").setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(_Forward(model), (ids,), dynamic_shapes=shapes, strict=False)


def _input_symbol(ep: torch.export.ExportedProgram):
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name.endswith("input_ids"):
            d = n.meta["val"].shape[1]
            return d.node.expr if isinstance(d, torch.SymInt) else int(d)
    raise RuntimeError("exported program has no input_ids placeholder")


def trace(model: torch.nn.Module) -> Traced:
    try:
        ep = _export(model, 16, dynamic=True)
        sym = _input_symbol(ep)
        if isinstance(sym, sympy.Symbol):
            from graphsim.ir import T

            return Traced(ep, {sym: T}, True)
    except Exception:  # guards on the token count (e.g. chunk padding): fall back to static
        pass
    ep = _export(model, STATIC_PROBE_TOKENS[0], dynamic=False)
    return Traced(ep, {}, False)
