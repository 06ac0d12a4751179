"""On-disk cache of traced graphs: a repeated `predict` / `simulate` / `search` on one model skips the trace.

    $GRAPHSIM_HOME/cache/graphs/<sha256>.json  ← {format, version, key, graph, report}

The key is the sha256 of everything the traced graph depends on: the config's content (canonical JSON,
so key order and whitespace do not matter), the model name the graph carries, the dtype, the importer's
options, and the versions of graphsim, torch and transformers. graphsim's version alone does not change
when its code does (an editable install), so the key also holds a digest of the importer's and the IR's
source files. Reading the key needs no torch: a hit loads the IR from JSON (graphsim/ir/serialize.py) and
never imports torch or transformers.

A damaged entry is ignored with a one-line notice, removed, and the model traced again. Entries are
written through a temp file and a rename (graphsim.atomic.publish). GRAPHSIM_NO_CACHE=1 (`graphsim
--no-cache`) turns the cache off for reads and writes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from graphsim.atomic import publish

FORMAT = "graphsim-graph-cache"
VERSION = 1
NO_CACHE_ENV = "GRAPHSIM_NO_CACHE"


def graphsim_home() -> Path:
    """$GRAPHSIM_HOME, else ~/.cache/graphsim (as graphsim.costing.predict.profile_home)."""
    base = os.environ.get("GRAPHSIM_HOME")
    return Path(base) if base else Path.home() / ".cache" / "graphsim"


def cache_dir() -> Path:
    return graphsim_home() / "cache" / "graphs"


def enabled() -> bool:
    return os.environ.get(NO_CACHE_ENV, "").strip().lower() in ("", "0", "false", "no")


def notice(message: str) -> None:
    """One line on stderr: the cache is a convenience, so its trouble is never an error."""
    print(f"notice: {message}", file=sys.stderr, flush=True)


def package_version(dist: str) -> str | None:
    """An installed distribution's version from its metadata (the package itself is not imported)."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _source_digest() -> str:
    """sha256 over the source of the code that makes a traced graph: graphsim/importers/hf/*, the aten map,
    the IR with its serializer, and the quantization reader (the graph's metadata holds the quantization
    config it returns)."""
    pkg = Path(__file__).resolve().parent.parent
    files = sorted([*(pkg / "importers" / "hf").glob("*.py"), pkg / "importers" / "aten_map.py",
                    *(pkg / "ir").glob("*.py"), pkg / "quantization.py"])
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def key_fields(config: dict[str, Any], name: str, dtype: str | None, **importer: Any) -> dict[str, Any]:
    """What a traced graph depends on (the cache key is the sha256 of this, as canonical JSON)."""
    return {"config": config, "name": name, "dtype": dtype, "importer": importer,
            "graphsim": package_version("graphsim"), "graphsim_source": _source_digest(),
            "torch": package_version("torch"), "transformers": package_version("transformers")}


def cache_key(fields: dict[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def entry_path(key: str) -> Path:
    return cache_dir() / f"{key}.json"


def load(fields: dict[str, Any]) -> tuple[Any, dict[str, Any]] | None:
    """(graph, the import report's JSON) stored under `fields`' key; None on a miss, when the cache is off, or
    for a damaged entry (removed, with a notice)."""
    if not enabled():
        return None
    key = cache_key(fields)
    path = entry_path(key)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        notice(f"ignoring unreadable graph cache entry {path} ({e}); tracing again")
        return None
    from graphsim.errors import GraphsimError
    from graphsim.ir.serialize import graph_from_json

    try:
        d = json.loads(text)
        if not isinstance(d, dict) or d.get("format") != FORMAT or d.get("version") != VERSION or d.get("key") != key:
            raise ValueError("not an entry of this cache version")
        graph = graph_from_json(d["graph"])
        graph.verify("graph cache")
        report = dict(d["report"])
    except (GraphsimError, ValueError, KeyError, TypeError, AttributeError) as e:
        detail = " ".join(str(e).split())[:120]
        notice(f"ignoring damaged graph cache entry {path} ({type(e).__name__}: {detail}); tracing again")
        path.unlink(missing_ok=True)
        return None
    return graph, report


def store(fields: dict[str, Any], graph: Any, report: dict[str, Any]) -> Path | None:
    """Write the entry atomically; a cache that cannot be written is a notice, never an error."""
    if not enabled():
        return None
    from graphsim.ir.serialize import graph_to_json

    key = cache_key(fields)
    path = entry_path(key)
    doc = {"format": FORMAT, "version": VERSION, "key": key,
           "made_with": {k: fields[k] for k in ("name", "dtype", "graphsim", "torch", "transformers")},
           "report": report, "graph": graph_to_json(graph)}
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, default=str)
        publish(tmp, path)
    except OSError as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        notice(f"cannot write the graph cache under {path.parent} ({e.strerror}); the trace is not cached")
        return None
    return path


def entries() -> list[Path]:
    d = cache_dir()
    return sorted(d.glob("*.json")) if d.is_dir() else []


def info() -> dict[str, Any]:
    files = entries()
    models = []
    for f in files:
        try:
            made = json.loads(f.read_text()).get("made_with", {})
        except (OSError, ValueError, AttributeError):
            made = {}
        models.append({"file": f.name, "bytes": f.stat().st_size, **(made if isinstance(made, dict) else {})})
    return {"directory": str(cache_dir()), "entries": len(files), "bytes": sum(m["bytes"] for m in models),
            "enabled": enabled(), "graphs": models}


def clear() -> int:
    """Remove every entry; the number removed."""
    n = 0
    for f in entries():
        f.unlink(missing_ok=True)
        n += 1
    return n
