"""Where search evaluations run: in this process, on a local pool of worker processes, or on a Ray cluster.

Every backend maps one module-level function `fn(context, task)` over a list of tasks and returns the
results in task order; the context is sent to each worker once. Evaluations are pure functions of
(context, task), so the backends give identical results.

- `LocalBackend(workers=1)` runs in this process (no start-up cost; the default on small machines);
  `workers > 1` uses a `ProcessPoolExecutor` (spawn) whose workers each build the cost tables they need.
- `RayBackend(address=None)` connects to a Ray cluster (`address`, e.g. `ray://head:10001` or `auto`), or
  starts a local Ray instance when none is given. Ray is an optional extra: `pip install 'graphsim[ray]'`.
  Workers on other machines need graphsim installed and the profile.db at the same path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, Protocol

from graphsim.errors import GraphsimError


class BackendError(GraphsimError):
    pass


class Backend(Protocol):
    name: str

    def map(self, fn: Callable[[Any, Any], Any], context: Any, tasks: Sequence[Any]) -> list[Any]: ...

    def workers(self) -> int: ...

    def close(self) -> None: ...


_WORKER_CONTEXT: list[Any] = []


def _init_worker(context: Any) -> None:
    _WORKER_CONTEXT[:] = [context]


def _call_in_worker(fn: Callable[[Any, Any], Any], task: Any) -> Any:
    return fn(_WORKER_CONTEXT[0], task)


class LocalBackend:
    name = "local"

    def __init__(self, workers: int | None = 1) -> None:
        n = (os.cpu_count() or 1) if workers is None else workers
        if n < 1:
            raise BackendError(f"--workers {n}; give at least 1")
        self.n = n
        self._pool: ProcessPoolExecutor | None = None
        self._pool_context: Any = None

    def workers(self) -> int:
        return self.n

    def map(self, fn: Callable[[Any, Any], Any], context: Any, tasks: Sequence[Any]) -> list[Any]:
        if self.n == 1 or len(tasks) <= 1:
            return [fn(context, t) for t in tasks]
        if self._pool is None or self._pool_context is not context:
            self.close()
            self._pool = ProcessPoolExecutor(self.n, mp_context=get_context("spawn"), initializer=_init_worker,
                                             initargs=(context,))
            self._pool_context = context
        futures = [self._pool.submit(_call_in_worker, fn, t) for t in tasks]
        return [f.result() for f in futures]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
            self._pool_context = None


class RayBackend:
    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise BackendError("--backend ray needs Ray: pip install 'graphsim[ray]' (or pip install ray)") from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "ignore_reinit_error": True}
            if address:
                kwargs["address"] = address
            elif num_cpus:
                kwargs["num_cpus"] = num_cpus
            try:
                ray.init(**kwargs)
            except Exception as e:  # connection errors come in many types
                raise BackendError(f"cannot start or reach Ray{f' at {address}' if address else ''}: "
                                   f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
            self.started = True
        self._remote = ray.remote(_ray_call)
        self._ctx_ref: Any = None
        self._ctx: Any = None

    def workers(self) -> int:
        return int(self.ray.cluster_resources().get("CPU", 1))

    def map(self, fn: Callable[[Any, Any], Any], context: Any, tasks: Sequence[Any]) -> list[Any]:
        if self._ctx is not context:
            self._ctx_ref, self._ctx = self.ray.put(context), context
        refs = [self._remote.remote(fn, self._ctx_ref, t) for t in tasks]
        return list(self.ray.get(refs))

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            self.started = False


def _ray_call(fn: Callable[[Any, Any], Any], context: Any, task: Any) -> Any:
    return fn(context, task)


def make_backend(name: str = "local", workers: int | None = 1, address: str | None = None) -> Backend:
    if name == "local":
        if address:
            raise BackendError("--address goes with --backend ray")
        return LocalBackend(workers)
    if name == "ray":
        return RayBackend(address, workers if workers and workers > 1 else None)
    raise BackendError(f"unknown backend '{name}'; use local or ray")
