"""Figures computed from a profile.db's rows, kept on disk until the file (or the code computing them) changes.

    rates = memo("profile_rates", db.path, ("h200_sxm", …), lambda: compute_rates(db, spec), ProfileRates,
                 code=[derived.__file__, roofline.__file__])

An entry lives in $GRAPHSIM_HOME/cache/profile/<name>-<sha256>.json; the key is the sha256 of the profile's
identity (resolved path, size, modification time in ns), the caller's key, and the source of the files in
`code`. A new import into the profile, a hand edit, or a change of the computing code gives a new key. A
frozen dataclass of plain fields round-trips through JSON; None is stored as such. An unreadable or damaged
entry is recomputed; an entry that cannot be written is skipped. GRAPHSIM_NO_CACHE=1 turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import Any, TypeVar

from graphsim.atomic import publish

T = TypeVar("T")


def _key(name: str, profile: Path, key: Any, code: list[str]) -> str | None:
    try:
        st = profile.stat()
        h = hashlib.sha256(json.dumps([name, str(profile.resolve()), st.st_size, st.st_mtime_ns, key],
                                      default=str).encode())
        for f in sorted(code):
            h.update(Path(f).read_bytes())
    except OSError:
        return None
    return h.hexdigest()


def memo(name: str, profile: str | os.PathLike[str], key: Any, compute: Callable[[], T | None], kind: type[T],
         code: list[str]) -> T | None:
    """`compute()`, read back from disk when the same profile file and code computed it before."""
    from graphsim.importers.graph_cache import enabled, graphsim_home

    digest = _key(name, Path(profile), key, code) if enabled() else None
    if digest is None:
        return compute()
    path = graphsim_home() / "cache" / "profile" / f"{name}-{digest}.json"
    try:
        d = json.loads(path.read_text())
        if d is None:
            return None
        if isinstance(d, dict) and is_dataclass(kind) and set(d) == {f.name for f in fields(kind)}:
            return kind(**d)
    except (OSError, ValueError, TypeError):
        pass
    value = compute()
    _store(path, None if value is None else asdict(value))  # type: ignore[arg-type]  (a dataclass instance)
    return value


def _store(path: Path, doc: Any) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        publish(tmp, path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
