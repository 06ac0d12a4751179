"""What a JSON result was computed with: `versions(...)` → the `versions` block every command's --json carries.

    {"graphsim": "0.1.0", "torch": "2.13.0", "transformers": "5.24.0",        # when the model was traced
     "engine_profile": "vllm==0.10.1",                                         # the modelled engine, when given
     "profile_tables": {"path": …, "engine": "vllm", "engine_version": "0.12.0",
                        "source": "aiconfigurator-core", "package_version": "0.12.0", "device": "NVIDIA H200"}}

Versions are read from the installed distributions' metadata: nothing is imported (a config-only command stays
free of torch). `profile_tables` describes the profile.db the prices came from: `profile` when given, else the
default $GRAPHSIM_HOME/profiles/<gpu>_vllm.db when it exists; absent when no measured rows were used.
"""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any


def _installed(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def profile_tables(profile: str | os.PathLike[str] | None = None, hardware: str | None = None) -> dict[str, Any] | None:
    """The provenance of the profile.db a command priced from (None when it used none or cannot be read)."""
    path: Path | None = Path(profile) if profile else None
    if path is None and hardware:
        from graphsim.costing.hardware import load_hardware
        from graphsim.costing.predict import default_profile_path
        from graphsim.errors import GraphsimError

        try:
            path = default_profile_path(load_hardware(hardware).id)
        except GraphsimError:
            return None
    if path is None or not path.is_file():
        return None
    from graphsim.costing.profile_db import ProfileDB
    from graphsim.errors import GraphsimError

    try:
        db = ProfileDB.open(path)
    except (GraphsimError, OSError):
        return None
    try:
        meta = db.meta
    finally:
        db.close()
    prov = meta.provenance or {}
    out = {"path": str(path), "engine": meta.engine, "engine_version": meta.engine_version, "device": meta.device,
           "source": prov.get("source"), "package_version": prov.get("package_version"),
           "schema_version": meta.schema_version}
    return {k: v for k, v in out.items() if v not in (None, "")}


def versions(profile: str | os.PathLike[str] | None = None, hardware: str | None = None,
             engine: str | None = None, priced: bool = True) -> dict[str, Any]:
    """The `versions` block of a JSON result. `priced`: the command traced the model and priced its kernels, so
    torch and transformers made the graph (a cached graph was traced with these versions: they are in its cache
    key) and a profile.db may have supplied the times; a config-only result records neither."""
    out: dict[str, Any] = {"graphsim": _installed("graphsim") or "unknown"}
    if engine:
        out["engine_profile"] = engine
    if priced:
        for dist in ("torch", "transformers"):
            v = _installed(dist)
            if v:
                out[dist] = v
        tables = profile_tables(profile, hardware)
        if tables:
            out["profile_tables"] = tables
    return out
