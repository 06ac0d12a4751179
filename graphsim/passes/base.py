"""Pass infrastructure: a pass is a small frozen dataclass whose fields are its options.

    @register_pass("fold")
    @dataclass(frozen=True)
    class Fold(Pass):
        def run(self, graph): ... return PassResult(graph, modified, stats)

`stats` counts what each rule did (rule name → count), so a pipeline can report it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from graphsim.errors import GraphsimError
from graphsim.ir import Graph


class PassError(GraphsimError):
    """A pass could not apply (bad option, a split that does not divide, missing prerequisite)."""


@dataclass
class PassResult:
    graph: Graph
    modified: bool
    stats: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the pass wants the user to know


@dataclass(frozen=True)
class Pass:
    name: ClassVar[str] = ""

    def run(self, graph: Graph) -> PassResult:  # pragma: no cover - interface
        raise NotImplementedError

    def spec(self) -> str:
        from dataclasses import fields

        opts = ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields(self))
        return f"{self.name}{{{opts}}}" if opts else self.name


PASSES: dict[str, type[Pass]] = {}


def register_pass(name: str):
    def deco(cls: type[Pass]) -> type[Pass]:
        cls.name = name
        PASSES[name] = cls
        return cls

    return deco
