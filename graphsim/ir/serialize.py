"""Versioned JSON round trip and a compact text form (for golden tests) of a Graph."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from graphsim.atomic import atomic_writer
from graphsim.errors import GraphsimError
from graphsim.ir.attrs import attrs_from_json, attrs_to_json, attrs_to_text
from graphsim.ir.graph import Graph, LayerSchedule, Node
from graphsim.ir.meta import GraphMeta
from graphsim.ir.ops import Op
from graphsim.ir.tensor import TensorSpec

FORMAT = "graphsim-graph"
VERSION = 1


def graph_to_json(g: Graph) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": g.name,
        "inputs": {k: s.to_str() for k, s in g.inputs.items()},
        "params": {k: s.to_str() for k, s in g.params.items()},
        "nodes": [
            {
                "name": n.name,
                "op": n.op.value,
                "inputs": list(n.inputs),
                "outputs": [s.to_str() for s in n.outputs],
                "attrs": attrs_to_json(n.attrs),
                "scope": n.scope,
                "module_type": n.module_type,
                "layer": n.layer,
                "target": n.target,
                "provenance": n.provenance,
            }
            for n in g.nodes
        ],
        "outputs": list(g.outputs),
        "schedule": None
        if g.schedule is None
        else {"tags": list(g.schedule.tags), "representative": dict(g.schedule.representative)},
        "meta": g.meta.to_json(),
    }


def graph_from_json(d: dict[str, Any]) -> Graph:
    if d.get("format") != FORMAT:
        raise GraphsimError("not a graphsim graph file (missing format tag); write one with `graphsim import -o`")
    if d.get("version") != VERSION:
        raise GraphsimError(
            f"graph file version {d.get('version')} is not supported (this graphsim reads version {VERSION}); re-import the model"
        )
    sched = d.get("schedule")
    return Graph(
        name=d["name"],
        inputs={k: TensorSpec.from_str(s) for k, s in d["inputs"].items()},
        params={k: TensorSpec.from_str(s) for k, s in d["params"].items()},
        nodes=[
            Node(
                name=n["name"],
                op=Op(n["op"]),
                inputs=tuple(n["inputs"]),
                outputs=tuple(TensorSpec.from_str(s) for s in n["outputs"]),
                attrs=attrs_from_json(n["attrs"]),
                scope=n.get("scope", ""),
                module_type=n.get("module_type", ""),
                layer=n.get("layer"),
                target=n.get("target", ""),
                provenance=n.get("provenance", ""),
            )
            for n in d["nodes"]
        ],
        outputs=list(d["outputs"]),
        schedule=None
        if sched is None
        else LayerSchedule(tuple(sched["tags"]), {k: int(v) for k, v in sched["representative"].items()}),
        meta=GraphMeta.from_json(d.get("meta") or {}),
    )


def save_graph(g: Graph, path: str | Path) -> None:
    """Write atomically: a failed write leaves no half-written file behind."""
    text = json.dumps(graph_to_json(g), indent=1)
    with atomic_writer(path) as f:  # temp beside it, fsync, rename; removed on an error or Ctrl-C
        f.write(text)


def load_graph(path: str | Path) -> Graph:
    path = Path(path)
    try:
        d = json.loads(path.read_text())
    except OSError as e:
        raise GraphsimError(f"cannot read {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise GraphsimError(f"{path} is not a text file; pass a file written by `graphsim import -o`") from None
    except json.JSONDecodeError as e:
        raise GraphsimError(f"{path} is not valid JSON ({e.msg}, line {e.lineno}); pass a file written by `graphsim import -o`") from None
    except RecursionError:  # json's decoder recurses once per nesting level
        raise GraphsimError(f"{path} nests its JSON too deeply to read; pass a file written by `graphsim import -o`") from None
    if not isinstance(d, dict):
        raise GraphsimError(f"{path} is not a graphsim graph file")
    try:
        g = graph_from_json(d)
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        detail = " ".join(str(e).split())[:160]  # one line, however the parser worded it
        raise GraphsimError(f"{path} is a damaged graph file ({type(e).__name__}: {detail}); re-import the model") from None
    g.verify(f"loading {path.name}")
    return g


def graph_to_text(g: Graph) -> str:
    """Compact, stable text form: one line per value definition, for golden files."""
    lines = [f"graph {g.name}"]
    for k, s in g.inputs.items():
        lines.append(f"  input %{k}: {s}")
    for k, s in g.params.items():
        lines.append(f"  param @{k}: {s}")
    params = set(g.params)
    for n in g.nodes:
        args = ", ".join(("@" if v in params else "%") + v for v in n.inputs)
        outs = ", ".join(str(s) for s in n.outputs)
        attrs = attrs_to_text(n.attrs)
        where = f"  # {n.scope}" if n.scope else ""
        layer = f" L{n.layer}" if n.layer is not None else ""
        lines.append(f"  %{n.name} = {n.op.value}({args}) -> {outs}{(' ' + attrs) if attrs else ''}{where}{layer}")
    lines.append("  return " + ", ".join("%" + o for o in g.outputs))
    if g.schedule is not None:
        lines.append("  schedule " + " ".join(f"{t}x{n}" for t, _, n in g.schedule.runs()))
    return "\n".join(lines) + "\n"
