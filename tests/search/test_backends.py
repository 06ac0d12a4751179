"""The backends agree: in-process, a local pool of worker processes, and a local Ray instance give identical
results for the same seed."""

import pytest
from search_helpers import comparable

from graphsim.serving.backends import BackendError, LocalBackend, make_backend
from graphsim.serving.search import run_search


def test_local_pool_matches_in_process(small_search, small_result):
    spec, ctx = small_search
    backend = LocalBackend(2)
    try:
        res = run_search(spec, backend, context=ctx)
    finally:
        backend.close()
    assert res.workers == 2
    assert comparable(res) == comparable(small_result)


def test_ray_matches_local(small_search, small_result):
    ray = pytest.importorskip("ray")
    spec, ctx = small_search
    backend = make_backend("ray", workers=2)
    try:
        res = run_search(spec, backend, context=ctx)
    finally:
        backend.close()
    assert not ray.is_initialized()
    assert res.backend == "ray"
    assert comparable(res) == comparable(small_result)


def test_backend_errors_are_one_line():
    with pytest.raises(BackendError, match="unknown backend"):
        make_backend("dask")
    with pytest.raises(BackendError, match="--address goes with --backend ray"):
        make_backend("local", address="ray://x:10001")
    with pytest.raises(BackendError):
        LocalBackend(0)
