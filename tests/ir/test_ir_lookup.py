"""Graph.node()'s index stays right while passes edit `nodes` in place; unique_name's suffix memo."""

from __future__ import annotations

import pytest

from graphsim.ir import DType, Graph, Node, Op, T, TensorSpec, unique_name

X = TensorSpec((T, 8), DType.BFLOAT16)


def _n(name: str) -> Node:
    return Node(name, Op.SILU, ("x",), (X,))


def _graph(*names: str) -> Graph:
    return Graph(name="g", inputs={"x": X}, nodes=[_n(k) for k in names], outputs=[names[-1]])


def test_lookup_follows_in_place_edits():
    g = _graph("a", "b", "c")
    assert g.node("b") is g.nodes[1]  # builds the index
    g.nodes.insert(0, _n("z"))  # every position shifts by one
    assert g.node("b") is g.nodes[2]
    replacement = _n("c").with_(scope="new")
    g.nodes[3] = replacement  # same name, new object, same position
    assert g.node("c") is replacement
    del g.nodes[1]  # "a" gone
    with pytest.raises(KeyError):
        g.node("a")
    g.nodes = [_n("q")]  # a new list
    assert g.node("q").name == "q"
    with pytest.raises(KeyError):
        g.node("b")


def test_lookup_is_not_part_of_equality_or_copies():
    g = _graph("a", "b")
    h = _graph("a", "b")
    g.node("b")
    assert g == h  # the index built on g is not compared
    c = g.copy()
    c.nodes.reverse()
    assert c.node("a") is c.nodes[1]
    assert g.node("a") is g.nodes[0]


def test_spec_of_a_second_output():
    two = Node("s", Op.SPLIT, ("x",), (X, TensorSpec((T, 4), DType.FLOAT32)))
    g = Graph(name="g", inputs={"x": X}, nodes=[two], outputs=["s#1"])
    assert g.spec_of("s#1").dtype is DType.FLOAT32
    assert g.spec_of("x") is X


def test_unique_name_memo_gives_the_same_names():
    # without the memo: a, a_2, a_3, then b, then a_4 (a_5 taken by hand in between → a_6 next after a_4)
    used: set[str] = set()
    plain = [unique_name("a", used) for _ in range(3)] + [unique_name("b", used)]
    used.add("a_5")
    plain += [unique_name("a", used), unique_name("a", used)]
    used2: set[str] = set()
    last: dict[str, int] = {}
    memo = [unique_name("a", used2, last) for _ in range(3)] + [unique_name("b", used2, last)]
    used2.add("a_5")
    memo += [unique_name("a", used2, last), unique_name("a", used2, last)]
    assert plain == ["a", "a_2", "a_3", "b", "a_4", "a_6"]
    assert memo == plain
    assert last == {"a": 6, "b": 1}
