"""`--json` output written as it is encoded: the same text as `print(json.dumps(obj, indent=1, default=float))`,
without holding the whole document as one string (a search's JSON is 3–11 MB; joining its pieces into one string
was the search's peak memory: benchmarks/search_memory.py)."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

_PIECES = 1 << 14  # encoded pieces joined per write


def print_json(obj: Any, file: IO[str] | None = None) -> None:
    """Write `obj` as indented JSON (non-JSON numbers as floats) and a newline, piece by piece."""
    out = file if file is not None else sys.stdout
    buf: list[str] = []
    for piece in json.JSONEncoder(indent=1, default=float).iterencode(obj):
        buf.append(piece)
        if len(buf) >= _PIECES:
            out.write("".join(buf))
            buf.clear()
    buf.append("\n")
    out.write("".join(buf))
    out.flush()
