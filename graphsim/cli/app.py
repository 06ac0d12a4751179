"""The `graphsim` command: a thin layer that parses, calls the library, and renders.

Each command lives in its own module under `graphsim/cli/` and registers itself on `app`;
`COMMAND_MODULES` lists them; options several commands share are declared once in `options.py`.
Errors derived from `GraphsimError`, usage errors (an unknown option, a bad value) and a missing
optional dependency each print one line starting `error:` and exit 2 (`--debug` shows the traceback of
the first and the last instead). Usage errors come from whichever click typer uses (its bundled copy,
typer >= 0.26, or the standalone package); nothing here imports click.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
import threading
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from graphsim.errors import GraphsimError

app = typer.Typer(
    name="graphsim",
    help="Predict how fast an LLM serves on given GPUs, from the model's own Hugging Face code.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err_console = Console(stderr=True)
console = Console()

STATE: dict[str, Any] = {"debug": False, "interrupted": False, "entry_point": False, "args": []}

# Modules that register commands on `app` (each defines its commands with @app.command()).
COMMAND_MODULES = [
    "graphsim.cli.models_cmd",
    "graphsim.cli.import_cmd",
    "graphsim.cli.work_cmd",
    "graphsim.cli.passes_cmd",
    "graphsim.cli.predict_cmd",
    "graphsim.cli.profiles_cmd",
    "graphsim.cli.capture_cmd", "graphsim.cli.align_cmd",
    "graphsim.cli.profile_cmd",
    "graphsim.cli.analyze_cmd",
    "graphsim.cli.kv_cmd", "graphsim.cli.simulate_cmd", "graphsim.cli.sweep_cmd",
    "graphsim.cli.search_cmd",
    "graphsim.cli.compare_cmd",
    "graphsim.cli.cache_cmd",
]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("graphsim")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown (not installed)"


def _show_version(value: bool) -> None:
    if value:
        console.print(f"graphsim {_version()}", highlight=False)
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_show_version,
                                 help="Print graphsim's version and exit."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Trace the model again instead of reading the graph "
                                  "cache ($GRAPHSIM_HOME/cache/graphs), and store nothing there."),
    no_auto_profile: bool = typer.Option(False, "--no-auto-profile", help="Do not build a missing "
                                         "$GRAPHSIM_HOME/profiles/<gpu>_vllm.db from aiconfigurator-core's tables."),
) -> None:
    STATE["debug"] = debug
    if no_cache:  # the environment reaches every importer, worker processes included
        os.environ["GRAPHSIM_NO_CACHE"] = "1"
    if no_auto_profile:
        os.environ["GRAPHSIM_NO_AUTO_PROFILE"] = "1"


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # a real missing dependency inside the module
                raise


def _on_sigint(signum: int, frame: object) -> None:
    # Remembered as well as raised: a library that catches every exception (torch does while it
    # imports) must not turn a Ctrl-C into a normal exit.
    STATE["interrupted"] = True
    raise KeyboardInterrupt


# What an interrupted command leaves behind (every output goes through graphsim.atomic: published
# whole or not at all; the profiler commits its rows in transactions and resumes on a rerun).
_KEPT = {
    "profile": "the rows measured so far are committed; rerun the same command to measure the rest",
}
_KEPT_DEFAULT = "no output was half-written; a file at an output path is as it was before"


def _interrupted() -> int:
    args = STATE.get("args") or []
    command = next((a for a in args if not a.startswith("-")), "")
    err_console.print(f"[bold red]interrupted[/]: {_KEPT.get(command, _KEPT_DEFAULT)}", soft_wrap=True)
    if STATE.get("entry_point"):
        # CPython remembers a KeyboardInterrupt raised inside exec()'d code even when a library caught
        # it (torch does while it imports), and then ends the process by SIGINT whatever the exit
        # code. As the program itself (not a call from Python), end here with 130, streams flushed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    return 130


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    STATE["debug"] = "--debug" in args
    STATE["interrupted"] = False
    STATE["entry_point"] = argv is None  # run as `graphsim …` / `python -m graphsim …`
    STATE["args"] = args
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        _register()
        app(args=args, prog_name="graphsim", standalone_mode=False)
    except GraphsimError as e:
        if STATE["debug"]:
            raise
        _error(str(e))
        return 2
    except (typer.Exit, SystemExit) as e:
        code = getattr(e, "exit_code", getattr(e, "code", 0))
        return int(code or 0)
    except KeyboardInterrupt:
        return _interrupted()
    except ModuleNotFoundError as e:
        message = _missing_module_message(e, _command_path(args))
        if message is None or STATE["debug"]:
            raise
        _error(message)
        return 2
    except Exception as e:  # usage errors (unknown option, bad value) and the like, from either click
        if _is_abort(e):  # click turns a Ctrl-C into Abort
            return _interrupted()
        if not _is_click_exception(e):
            raise
        return _show_click_exception(e, args)
    return _interrupted() if STATE["interrupted"] else 0


def _error(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, highlight=False)


# Usage errors come from the click that typer uses: typer >= 0.26 bundles its own (its exceptions
# derive from the public `typer.TyperException`); older typer uses the standalone `click`, whose
# exceptions are only raised when it is imported already. Neither is imported here for the check.
def _click_modules() -> list[object]:
    mod = sys.modules.get("click")
    return [mod] if mod is not None else []


def _is_click_exception(e: Exception) -> bool:
    bases: list[type] = [typer.TyperException] if hasattr(typer, "TyperException") else []
    bases += [m.ClickException for m in _click_modules()]  # type: ignore[attr-defined]
    return isinstance(e, tuple(bases))


def _is_abort(e: Exception) -> bool:
    bases: list[type] = [typer.Abort] + [m.Abort for m in _click_modules()]  # type: ignore[attr-defined]
    return isinstance(e, tuple(bases))


def _show_click_exception(e: Exception, args: list[str]) -> int:
    """One `error:` line naming the bad option or value, the command, and where its options are listed."""
    code = int(getattr(e, "exit_code", 1))
    message = " ".join(str(e.format_message()).split())  # type: ignore[attr-defined]
    if not message:  # `no_args_is_help`: the help is already printed
        return code
    command = getattr(getattr(e, "ctx", None), "command_path", None) or _command_path(args)
    help_hint = f"see `{command} --help`"
    option_name = getattr(e, "option_name", None)
    param = getattr(e, "param", None)
    if option_name is not None and hasattr(e, "possibilities"):  # an unknown option
        close = sorted(getattr(e, "possibilities", None) or ())
        guess = f"did you mean {' or '.join(close)}? " if close else ""
        _error(f"no such option {option_name} for `{command}` ({guess}{help_hint})")
    elif param is not None and getattr(e, "message", "") and not hasattr(e, "param_type"):  # a bad value
        opts = list(getattr(param, "opts", None) or [])
        names = " / ".join(o for o in opts if o.startswith("-")) or str(getattr(param, "human_readable_name", param))
        given = _given_value(args, opts)
        value = f" {given!r}" if given is not None else ""
        detail = " ".join(str(getattr(e, "message", "")).split()).rstrip(".")
        _error(f"invalid value{value} for {names} of `{command}`: {detail} ({help_hint})")
    else:  # a missing argument, an extra argument, an unknown command, an option without its value
        _error(f"{message[:1].lower()}{message[1:].rstrip('.')} ({help_hint})")
    return code


def _command_path(args: list[str]) -> str:
    """`graphsim profiles show` for args that name that command (when click's error carries no context)."""
    words, cmd = ["graphsim"], typer.main.get_command(app)
    for arg in args:
        sub = (getattr(cmd, "commands", None) or {}).get(arg)
        if sub is None:
            continue
        words.append(arg)
        cmd = sub
    return " ".join(words)


def _given_value(args: list[str], opts: list[str]) -> str | None:
    """The value the command line gave one of `opts` (the last one given: it is the one that counts)."""
    found = None
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in opts and eq:
            found = value
        elif arg in opts and i + 1 < len(args):
            found = args[i + 1]
    return found


# Import names of optional dependencies that differ from their distribution's name.
_IMPORT_NAME = {"pyyaml": "yaml", "aiconfigurator-core": "aiconfigurator"}


def _missing_module_message(e: ModuleNotFoundError, command: str) -> str | None:
    """The extra (pyproject's optional-dependencies) that provides a missing module, with its pip line;
    None for a module of graphsim's own (a bug, not an install problem)."""
    module = (e.name or "").split(".")[0]
    if not module or module == "graphsim":
        return None
    from importlib.metadata import PackageNotFoundError, requires

    try:
        reqs = requires("graphsim") or []
    except PackageNotFoundError:
        reqs = []
    extras: list[str] = []
    for req in reqs:
        dist = re.split(r"[\s;<>=!~\[]", req, maxsplit=1)[0].lower()
        if _IMPORT_NAME.get(dist, dist.replace("-", "_")) == module:
            extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)", req)
            if extra is None:
                return f"graphsim needs {module}, which is not installed: pip install {dist} (or reinstall graphsim)"
            extras.append(extra.group(1))
    wanted = [x for x in extras if x != "test"] or extras
    if wanted:
        return f"`{command}` needs {module}, which is not installed: pip install 'graphsim[{wanted[0]}]'"
    return f"`{command}` needs the Python module {module}, which is not installed: pip install {module}"


if __name__ == "__main__":
    sys.exit(main())
