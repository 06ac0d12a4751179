"""Kernels stay a DAG: a rule's group is taken only where contracting it closes no cycle with the groups before it.

Why a cycle can appear: a rule gathers its members by walking the graph (e.g. `patterns.ancestors_within`, which
walks *through* nodes it does not collect), so a group can hold two nodes a and c while a path a → b → c leaves the
group through b, a node another kernel owns or will own. Contracted into kernels, a → b and b → c become
group → kernel(b) → group: a cycle, which `_build_graph` could only report (HunYuan-V4's indexer: the fp32 cast of
the hidden states feeding `weights_proj` was gathered into the indexer, which also reads `weights_proj`'s output).

The guard (run by `apply_rules` on every group that makes a kernel): with the kernels claimed so far contracted and
every other node on its own, a group closes a cycle exactly when an outside path leads from one member back to
another. Such members (the sources of the path) are dropped from the group, repeatedly, until none is left; the
rule's own anchor nodes (the `Node` values of `Candidate.info`) are never dropped: a group that would lose one is
refused instead. Dropped nodes stay free for later rules or the leftover policy, and the pass notes each.

The search is bounded by position. Every graph edge goes from an earlier node to a later one (the aten graph is in
topological order), so a path can only come back below a position through a claimed kernel that has members on
both sides of it. Of the kernels with a member at or before position B, let H(B) be the latest member: from any
node after B* (the fixpoint of B → max(B, H(B)) starting at the group's last member) no path returns to the group,
and the search visits nothing after B*. H is a prefix maximum over first-member positions (a Fenwick tree), so a
group whose neighbours are local costs a walk over the nodes between its members.
"""

from __future__ import annotations

from graphsim.ir import Node, value_name


class PrefixMax:
    """Fenwick tree over positions 0..n-1: `raise_at(i, v)` (values only grow), `query(i)` = max over 0..i."""

    def __init__(self, n: int):
        self.n = n
        self.tree = [-1] * (n + 1)

    def raise_at(self, i: int, value: int) -> None:
        i += 1
        while i <= self.n:
            if self.tree[i] < value:
                self.tree[i] = value
            i += i & -i

    def query(self, i: int) -> int:
        i = min(i, self.n - 1) + 1
        best = -1
        while i > 0:
            best = max(best, self.tree[i])
            i -= i & -i
        return best


class KernelDag:
    """The kernels claimed so far, as the guard sees them: node → kernel index, members per kernel, and the span
    of each kernel's positions (for the bound)."""

    def __init__(self, nodes: list[Node], users: dict[str, list[Node]]):
        self.pos = {n.name: i for i, n in enumerate(nodes)}
        self.succ: dict[str, list[str]] = {}
        for n in nodes:
            out = {u.name: None for k in range(len(n.outputs)) for u in users.get(value_name(n.name, k), ())}
            self.succ[n.name] = list(out)
        self.kernel_of: dict[str, int] = {}
        self.members: dict[int, list[str]] = {}
        self.last_from = PrefixMax(max(len(nodes), 1))

    def add(self, idx: int, names: list[str]) -> None:
        self.members[idx] = names
        for name in names:
            self.kernel_of[name] = idx
        if len(names) > 1:
            positions = [self.pos[n] for n in names]
            self.last_from.raise_at(min(positions), max(positions))

    def _bound(self, last: int) -> int:
        b = last
        while True:
            h = self.last_from.query(b)
            if h <= b:
                return b
            b = h

    def returns(self, group: set[str], start: list[str]) -> bool:
        """True if a path from the outside users of `start` (members of `group`) reaches a member of `group`."""
        bound = self._bound(max(self.pos[n] for n in group))
        seen: set[str] = set()
        todo = [u for s in start for u in self.succ[s] if u not in group]
        while todo:
            n = todo.pop()
            if n in seen or self.pos[n] > bound:
                continue
            if n in group:
                return True
            seen.add(n)
            k = self.kernel_of.get(n)
            for m in (self.members[k] if k is not None else (n,)):
                if m != n:
                    seen.add(m)
                todo.extend(u for u in self.succ[m] if u not in seen)
        return False

    def convex_part(self, names: list[str], keep: set[str]) -> tuple[list[str], list[str]] | None:
        """(kept, dropped) members of a group whose contraction closes no cycle, dropping the sources of the
        outside paths back into it; None when an anchor in `keep` would have to go."""
        group = set(names)
        if len(group) < 2 or not self.returns(group, names):
            return names, []
        dropped: list[str] = []
        while len(group) > 1:
            sources = [n for n in names if n in group and self.returns(group, [n])]
            if not sources:
                break
            if keep & set(sources):
                return None
            group -= set(sources)
            dropped += sources
        return [n for n in names if n in group], dropped
