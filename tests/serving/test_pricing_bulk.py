"""Warming table rows in bounded calls (pricing.BULK_STEPS) gives exactly the rows one bulk call gives."""

import numpy as np

from graphsim.serving import pricing
from graphsim.serving.pricing import TreeCost


def _warmed(llama_tree, monkeypatch, bulk_steps):
    tree, pricer, dtypes = llama_tree
    monkeypatch.setattr(pricing, "BULK_STEPS", bulk_steps)
    cost = TreeCost(tree, pricer, dtypes, max_tokens=512, max_seqs=24, max_context=3000)
    calls = []
    leaf_times = cost._leaf_times
    monkeypatch.setattr(cost, "_leaf_times", lambda steps: calls.append(len(steps)) or leaf_times(steps))
    cost.warm_decode_rows(range(1, 25))
    cost.warm_prefill_rows(2000)
    return cost, calls


def test_rows_warmed_in_small_calls_equal_one_bulk_call(llama_tree, monkeypatch):
    one, one_calls = _warmed(llama_tree, monkeypatch, 10**9)
    split, split_calls = _warmed(llama_tree, monkeypatch, 1)  # one batch size (one cached prefix) per call
    n_ctx, n_chunks = len(one.ctx_grid), len(one.n_grid)
    assert len(one_calls) == 2  # decode rows, then prefill rows
    assert len(split_calls) == 24 + len(one._pre)  # one call per batch size and per prefix
    assert max(split_calls) == max(n_ctx, n_chunks)
    assert sorted(one._dec) == sorted(split._dec) == list(range(1, 25))
    assert sorted(one._pre) == sorted(split._pre) and one._pre
    for table, other in ((one._dec, split._dec), (one._pre, split._pre), (one._dec_split, split._dec_split),
                         (one._pre_split, split._pre_split)):
        for k, v in table.items():
            for a, b in zip(v if isinstance(v, tuple) else (v,), other[k] if isinstance(v, tuple) else (other[k],),
                            strict=True):
                assert np.array_equal(a, b)  # bit for bit: each probe step is priced on its own
