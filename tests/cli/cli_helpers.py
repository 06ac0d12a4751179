"""The CLI's commands as the app registers them (never a hand-written list), and how to run them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import typer

from graphsim.cli.app import _register, app


def commands() -> list[tuple[tuple[str, ...], Any]]:
    """Every command the `graphsim` entry point has: (its words after `graphsim`, its click command),
    the root group first, then each leaf (`predict`, `capture show`, `profiles hardware`, …)."""
    _register()
    root = typer.main.get_command(app)
    found: list[tuple[tuple[str, ...], Any]] = [((), root)]

    def walk(cmd: Any, words: tuple[str, ...]) -> None:
        for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
            if getattr(sub, "commands", None):
                walk(sub, (*words, name))
            else:
                found.append(((*words, name), sub))

    walk(root, ())
    return found


def options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if getattr(p, "param_type_name", "") == "option"]


def value_type(param: Any) -> type | None:
    """int or float for an option that takes a number (typer's bundled click or the standalone one)."""
    if getattr(param, "is_flag", False):
        return None
    descriptor = getattr(param, "type_descriptor", None)  # typer >= 0.26
    if descriptor is not None:
        return descriptor.annotation if descriptor.annotation in (int, float) else None
    name = getattr(getattr(param, "type", None), "name", "")  # click
    return {"integer": int, "integer range": int, "float": float, "float range": float}.get(name)


def entry_point() -> str | None:
    """The installed `graphsim` script: beside this Python, else on PATH."""
    beside = Path(sys.executable).parent / "graphsim"
    return str(beside) if beside.is_file() else shutil.which("graphsim")


def run_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    exe = entry_point()
    assert exe is not None
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=120)
