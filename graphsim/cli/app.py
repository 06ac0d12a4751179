"""The `graphsim` command: a thin layer that parses, calls the library, and renders.

Each command lives in its own module under `graphsim/cli/` and registers itself on `app`;
`COMMAND_MODULES` lists them. Errors derived from `GraphsimError` print one line and exit 2;
`--debug` shows the traceback instead.
"""

from __future__ import annotations

import importlib
import sys

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

STATE = {"debug": False}

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
    "graphsim.cli.kv_cmd", "graphsim.cli.simulate_cmd",
    "graphsim.cli.search_cmd",
]


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks on errors.")) -> None:
    STATE["debug"] = debug


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # a real missing dependency inside the module
                raise


def main(argv: list[str] | None = None) -> int:
    _register()
    args = sys.argv[1:] if argv is None else argv
    STATE["debug"] = "--debug" in args
    try:
        app(args=args, standalone_mode=False)
    except GraphsimError as e:
        if STATE["debug"]:
            raise
        err_console.print(f"[bold red]error:[/] {escape(str(e))}", soft_wrap=True, highlight=False)
        return 2
    except (typer.Exit, SystemExit) as e:
        code = getattr(e, "exit_code", getattr(e, "code", 0))
        return int(code or 0)
    except KeyboardInterrupt:
        err_console.print("[bold red]interrupted[/]")
        return 130
    except Exception as e:  # click usage errors and the like
        import click

        if isinstance(e, click.ClickException):
            e.show()
            return 2
        if isinstance(e, click.exceptions.Abort):
            return 1
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
