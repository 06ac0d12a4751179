"""What keeps the search's peak memory down (benchmarks/search_memory.py): a new search context drops the last
one's cached cost tables, and --json output is streamed, byte for byte the text json.dumps gives."""

import io
import json
from dataclasses import replace

import numpy as np
from search_helpers import comparable

from graphsim.cli.json_out import print_json
from graphsim.serving import search_eval
from graphsim.serving.search import run_search


def test_a_new_search_context_drops_the_last_ones_tables(small_search, small_result):
    spec, ctx = small_search
    steady = spec.model_copy(update={"verify": 0})
    first = comparable(run_search(steady, context=ctx))
    assert {k[0] for k in search_eval._COSTS} == {ctx.key}
    other = replace(ctx, key=ctx.key + "-other")  # another engine's context, as `search --engine auto` runs next
    run_search(steady, context=other)
    assert search_eval._COSTS and {k[0] for k in search_eval._COSTS} == {other.key}
    assert {k[0] for k in search_eval._DEPLOYMENTS} <= {other.key}
    assert {k[0] for k in search_eval._BYTES} <= {other.key}
    # the tables rebuilt for the first context again give its results unchanged
    assert comparable(run_search(steady, context=ctx)) == first


def test_streamed_json_is_the_text_json_dumps_gives():
    obj = {"rows": [{"id": i, "x": np.float64(i / 3), "nan": float("nan"), "é": [True, None, "a\n\"b"]}
                    for i in range(40_000)], "n": np.int64(7)}
    out = io.StringIO()
    print_json(obj, out)
    assert out.getvalue() == json.dumps(obj, indent=1, default=float) + "\n"
