"""`graphsim cache info|clear`: the on-disk cache of traced graphs (graphsim/importers/graph_cache.py)."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from graphsim.cli import options as opt
from graphsim.cli.app import app, console

cache_app = typer.Typer(help="The cache of traced graphs under $GRAPHSIM_HOME/cache/graphs.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("info")
def cache_info(as_json: opt.Json = False) -> None:
    """Where the graph cache is, and the graphs it holds."""
    from graphsim.importers import graph_cache

    d = graph_cache.info()
    if as_json:
        print(json.dumps(d, indent=1))
        return
    state = "on" if d["enabled"] else "off (GRAPHSIM_NO_CACHE is set)"
    table = Table(title=f"graph cache {d['directory']}: {d['entries']} graph(s), {d['bytes'] / 1e6:.2f} MB, {state}")
    for col in ("model", "dtype", "graphsim", "torch", "transformers", "bytes"):
        table.add_column(col)
    for g in d["graphs"]:
        table.add_row(*(str(g.get(c) if g.get(c) is not None else "config's" if c == "dtype" else "?")
                        for c in ("name", "dtype", "graphsim", "torch", "transformers", "bytes")))
    console.print(table)


@cache_app.command("clear")
def cache_clear(as_json: opt.Json = False) -> None:
    """Remove every cached graph (the next run traces again) and the figures cached from profile.db files."""
    from graphsim.importers import graph_cache

    n = graph_cache.clear()
    memo_dir = graph_cache.graphsim_home() / "cache" / "profile"  # graphsim/costing/disk_memo.py
    memos = sorted(memo_dir.glob("*.json")) if memo_dir.is_dir() else []
    for f in memos:
        f.unlink(missing_ok=True)
    if as_json:
        print(json.dumps({"directory": str(graph_cache.cache_dir()), "removed": n,
                          "profile_figures_removed": len(memos)}))
        return
    console.print(f"removed {n} cached graph(s) from {graph_cache.cache_dir()} and {len(memos)} cached profile "
                  f"figure(s) from {memo_dir}")
