"""Swapping modules' forwards for semantic ones during a trace, and putting them back."""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator

import torch


@contextlib.contextmanager
def swapped_forwards(model: torch.nn.Module, choose: Callable[[torch.nn.Module], Callable | None]) -> Iterator[list[str]]:
    """Give every module of `model` for which `choose(module)` returns a function that function as its forward
    (bound to the module); restore the class's forward after. Yields the swapped classes' forward names, sorted
    (the import report lists them)."""
    swapped: list[torch.nn.Module] = []
    try:
        for m in model.modules():
            forward = choose(m)
            if forward is not None:
                m.forward = types.MethodType(forward, m)
                swapped.append(m)
        yield sorted({f"{type(m).__module__}.{type(m).__name__}.forward" for m in swapped})
    finally:
        for m in swapped:
            del m.forward
