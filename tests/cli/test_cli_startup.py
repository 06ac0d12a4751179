"""Config-only commands start without torch or transformers (they are imported only to trace a model)."""

from __future__ import annotations

import pytest

HEAVY = ("torch", "transformers")


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["models", "--json"], ["work", "llama-3.1-8b", "--json"],
                                  ["kv", "llama-3.1-8b", "--json"], ["cache", "info", "--json"]])
def test_config_only_commands_do_not_import_torch(args, modules_loaded_by):
    code = ("import contextlib, io\nfrom graphsim.cli.app import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    rc = main({args!r})\nassert rc == 0, rc\n")
    loaded = set(modules_loaded_by(code))
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
