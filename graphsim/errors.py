"""User-facing errors: each carries a one-line message naming the problem and the fix."""


class GraphsimError(Exception):
    """A problem with the user's input or environment; the CLI prints it on one line, exit code 2."""


class UnknownModelError(GraphsimError):
    pass


class ConfigError(GraphsimError):
    pass


class UnsupportedArchitectureError(GraphsimError):
    pass


class GraphError(GraphsimError):
    """The IR broke an invariant (names the pass or importer that broke it)."""
