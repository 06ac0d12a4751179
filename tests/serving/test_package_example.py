"""The usage example in `graphsim.serving`'s docstring runs as written (a doctest), with the affine stand-in
cost in place of the traced cost tree so that it needs no torch and runs in a second."""

from __future__ import annotations

import doctest

import pytest
from serving_helpers import AffineCost

import graphsim.serving
import graphsim.serving.deployment


def test_the_package_docstring_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graphsim.serving.deployment, "build_cost", lambda dep, profile=None: (AffineCost(), "", 0))
    assert graphsim.serving.__doc__ is not None
    test = doctest.DocTestParser().get_doctest(graphsim.serving.__doc__, {}, "graphsim.serving", None, 0)
    assert len(test.examples) >= 10
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
