"""The Pareto frontier of deployments: output tokens/s per GPU against tokens/s per user, both maximised."""

from __future__ import annotations

import math
from collections.abc import Sequence


def pareto_front(xs: Sequence[float], ys: Sequence[float], tiebreak: Sequence[float] | None = None) -> list[int]:
    """Indices of the non-dominated points (maximising x and y), by x descending.

    A point is dominated when another is at least as good in both and better in one. Equal points are all
    kept, unless `tiebreak` is given: then only the one with the smallest tiebreak (then index) of each set
    of equal points. Points with a non-finite coordinate are never on the frontier."""
    idx = [i for i in range(len(xs)) if math.isfinite(xs[i]) and math.isfinite(ys[i])]
    tb = tiebreak if tiebreak is not None else [0.0] * len(xs)
    idx.sort(key=lambda i: (-xs[i], -ys[i], tb[i], i))
    out: list[int] = []
    best_y = -math.inf  # best y among points of strictly greater x
    k = 0
    while k < len(idx):
        j = k
        while j < len(idx) and xs[idx[j]] == xs[idx[k]]:
            j += 1
        group = idx[k:j]
        top = ys[group[0]]  # sorted by y descending within equal x
        if top > best_y:
            out += [group[0]] if tiebreak is not None else [i for i in group if ys[i] == top]
        best_y = max(best_y, top)
        k = j
    return out


def dominated_by(i: int, xs: Sequence[float], ys: Sequence[float], front: Sequence[int]) -> int | None:
    """A frontier point that dominates point i (the one with the most y), or None."""
    best = None
    for j in front:
        dominates = j != i and xs[j] >= xs[i] and ys[j] >= ys[i] and (xs[j] > xs[i] or ys[j] > ys[i])
        if dominates and (best is None or ys[j] > ys[best]):
            best = j
    return best
