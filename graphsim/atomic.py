"""Outputs appear whole or not at all: write to a temporary file beside the target, then publish it."""

from __future__ import annotations

import os
from pathlib import Path


def publish(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename the finished `tmp` over `path`, with the permissions a plain new file would get
    (mkstemp makes its files 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o666 & ~mask)
    os.replace(tmp, Path(path))
