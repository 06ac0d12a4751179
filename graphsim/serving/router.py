"""Routing requests over data-parallel replicas."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Protocol

from graphsim.errors import GraphsimError


class RouterPolicy(str, Enum):
    ROUND_ROBIN = "round-robin"
    LEAST_OUTSTANDING = "least-outstanding"


class _Replica(Protocol):
    @property
    def outstanding(self) -> int: ...


class Router:
    """Round robin: replicas in turn. Least outstanding requests: the replica with the fewest requests
    waiting or running at the arrival instant (ties go to the lowest index)."""

    def __init__(self, policy: RouterPolicy | str) -> None:
        try:
            self.policy = RouterPolicy(policy)
        except ValueError:
            raise GraphsimError(f"unknown router '{policy}'; use round-robin or least-outstanding") from None
        self._next = 0

    def pick(self, replicas: Sequence[_Replica]) -> int:
        if self.policy is RouterPolicy.ROUND_ROBIN:
            i = self._next % len(replicas)
            self._next += 1
            return i
        return min(range(len(replicas)), key=lambda i: replicas[i].outstanding)
