"""Parse and run a pass pipeline such as `fold,fuse{target=vllm},tp{size=4},ep{size=8}`.

Options are typed by the pass dataclass's fields; `verify()` runs after every pass, so a broken
graph is reported with the name of the pass that broke it.
"""

from __future__ import annotations

import re
import time
from dataclasses import MISSING, dataclass, fields
from typing import Any, get_type_hints

from graphsim.ir import Graph
from graphsim.passes.base import PASSES, Pass, PassError, PassResult

_ITEM = re.compile(r"\s*([A-Za-z_][\w-]*)\s*(?:\{([^}]*)\})?\s*(?:,|$)")


def _convert(value: str, typ: Any, where: str) -> Any:
    try:
        if typ is bool:
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if typ is int:
            return int(value)
        if typ is float:
            return float(value)
        return value
    except ValueError:
        raise PassError(f"{where}: '{value}' is not a valid {getattr(typ, '__name__', typ)}") from None


def parse_pipeline(text: str) -> list[Pass]:
    """`fold,fuse{target=vllm},tp{size=4}` → pass instances (registered names only)."""
    _load_builtin_passes()
    out: list[Pass] = []
    pos = 0
    text = text.strip()
    if not text:
        raise PassError("empty pipeline; pass e.g. 'fold,fuse{target=vllm}'")
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if not m or m.end() == pos:
            raise PassError(f"cannot parse pipeline at '{text[pos:]}'; expected name or name{{key=value,...}}")
        name, opts = m.group(1), m.group(2)
        if name not in PASSES:
            raise PassError(f"unknown pass '{name}'; known passes: {', '.join(sorted(PASSES))}")
        cls = PASSES[name]
        hints = get_type_hints(cls)
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for part in filter(None, (p.strip() for p in (opts or "").split(","))):
            if "=" not in part:
                raise PassError(f"pass '{name}': option '{part}' must be key=value")
            k, v = (x.strip() for x in part.split("=", 1))
            if k not in known:
                raise PassError(f"pass '{name}' has no option '{k}'; options: {', '.join(known) or 'none'}")
            kwargs[k] = _convert(v, hints.get(k, str), f"pass '{name}' option '{k}'")
        missing = [f.name for f in known.values() if f.name not in kwargs and f.default is MISSING
                   and f.default_factory is MISSING]
        if missing:
            raise PassError(f"pass '{name}' needs option(s) {', '.join(missing)}")
        try:
            out.append(cls(**kwargs))
        except ValueError as e:
            raise PassError(f"pass '{name}': {e}") from None
        pos = m.end()
    return out


@dataclass
class PipelineRun:
    graph: Graph
    results: list[tuple[Pass, PassResult, float]]  # pass, result, seconds


def run_pipeline(graph: Graph, pipeline: str | list[Pass]) -> PipelineRun:
    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else pipeline
    graph.verify("input graph")
    results = []
    for p in passes:
        t0 = time.perf_counter()
        res = p.run(graph)
        res.graph.verify(f"pass '{p.spec()}'")
        results.append((p, res, time.perf_counter() - t0))
        graph = res.graph
    return PipelineRun(graph, results)


def _load_builtin_passes() -> None:
    # importing the modules registers their passes
    from graphsim.passes import fold  # noqa: F401
    from graphsim.passes.fuse import fuse_pass  # noqa: F401
    from graphsim.passes.fuse import vllm_inductor  # noqa: F401
    from graphsim.passes.partition import ep, tp  # noqa: F401
