"""User-facing errors: each carries a one-line message naming the problem and the fix."""


class GraphsimError(Exception):
    """A problem with the user's input or environment; the CLI prints it on one line, exit code 2. Line
    breaks in the message (user text quoted in it: a file name, an option value) are shown escaped."""

    def __init__(self, *args: object) -> None:
        super().__init__(*(one_line(a) if isinstance(a, str) else a for a in args))


def one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


class UnknownModelError(GraphsimError):
    pass


class ConfigError(GraphsimError):
    pass


class UnsupportedArchitectureError(GraphsimError):
    pass


class GraphError(GraphsimError):
    """The IR broke an invariant (names the pass or importer that broke it)."""
