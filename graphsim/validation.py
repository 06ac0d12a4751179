"""Validation of the files a user hands in (hardware specs, traces, …) at the boundary.

Each file format is a pydantic model with the ranges a value must lie in (finite, positive where it
must be, sizes below physical limits). `read_text` / `read_json` read a file (unreadable, binary and
non-JSON files are one line), and `validate` checks a document against its model, turning every
problem into one line that names each bad field with its location and what it must be, and the fix —
all problems at once, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class Strict(BaseModel):
    """Base of the file models: unknown keys are errors (a typo is not silently ignored), no NaN/inf."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


def _where(loc: tuple[int | str, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(document)"


def problems(e: ValidationError, where: Callable[[tuple[int | str, ...]], str] = _where) -> list[str]:
    """One short phrase per problem: `field.sub: message (got value)` (`where` spells the location)."""
    out = []
    for err in e.errors(include_url=False):
        got = err.get("input")
        shown = "" if err["type"] in ("missing", "extra_forbidden") or isinstance(got, (dict, list)) else f" (got {got!r})"
        msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"][0].lower() + err["msg"][1:]
        out.append(f"{where(tuple(err['loc']))}: {msg}{shown}")
    return out


def validate(model: type[M], data: Any, what: str, fix: str) -> M:
    """`data` checked against `model`; a ValueError naming every problem and the fix otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ValueError(f"{what}: {'; '.join(problems(e))}; {fix}") from None


def read_text(path: str | Path, what: str, hint: str = "") -> str:
    """The UTF-8 text in `path` (ValueError naming the file and the problem: unreadable, or not UTF-8
    text, then `hint` on what the file should hold)."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{what} {path} is not UTF-8 text (is it a binary file?)" + (f"; {hint}" if hint else "")) from None
    except OSError as e:
        raise ValueError(f"cannot read {what} {path}: {e.strerror or e}") from None


def read_json(path: Path, what: str) -> Any:
    """The JSON document in `path` (ValueError naming the file and the problem: unreadable, not UTF-8, not JSON)."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{what} {path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except RecursionError:  # json's decoder recurses once per nesting level
        raise ValueError(f"{what} {path} nests its JSON too deeply to read") from None
