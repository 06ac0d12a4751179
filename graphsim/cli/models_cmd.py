"""`graphsim models`: list the bundled offline catalog."""

from __future__ import annotations

import json

from rich.table import Table

from graphsim.catalog import catalog, catalog_config
from graphsim.cli import options as opt
from graphsim.cli.app import app, console


@app.command("models")
def models(as_json: opt.Json = False) -> None:
    """List the bundled model catalog (offline config.json files)."""
    rows = []
    for e in catalog():
        cfg = catalog_config(e)
        rows.append(
            {
                "name": e.name,
                "hf_id": e.hf_id,
                "architecture": (cfg.get("architectures") or ["?"])[0],
                "layers": cfg.get("num_hidden_layers"),
                "hidden_size": cfg.get("hidden_size"),
            }
        )
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = Table(title="graphsim catalog (bundled config.json files)")
    for col in ("name", "hf_id", "architecture", "layers", "hidden_size"):
        table.add_column(col)
    for r in rows:
        table.add_row(*(str(r[c]) for c in ("name", "hf_id", "architecture", "layers", "hidden_size")))
    console.print(table)
