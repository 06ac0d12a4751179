"""Shared pieces of the analyzer tests: graphs imported once per session, roofline-only pricing."""

from __future__ import annotations

from functools import cache

from graphsim.analysis import analyze_prepared, prepare_model


@cache
def imported(model: str):
    """The unfused graph of a catalog model, traced once per test session."""
    from graphsim.importers.hf import import_hf

    graph, _ = import_hf(model)
    return graph


def prepare(model: str, tp: int = 1, batch: str = "decode:64x2048", ep: int = 1, **kw):
    """Price on the H200 roofline (no profile.db: the caller isolates $GRAPHSIM_HOME)."""
    return prepare_model(model, gpu="h200", tp=tp, ep=ep, batch=batch, graph=imported(model), **kw)


def analysis(model: str, tp: int = 1, batch: str = "decode:64x2048", **kw):
    return analyze_prepared(prepare(model, tp, batch, **kw))
