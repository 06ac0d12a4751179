"""How many routed experts a step touches, under uniform top-k routing.

Each of T tokens picks k distinct experts of E uniformly at random, so a given expert is missed by
one token with probability 1 − k/E and by all T with (1 − k/E)^T. The expected number of distinct
experts touched is E·(1 − (1 − k/E)^T); at most min(E, T·k) can be touched (the worst case for
parameter reads).
"""

from __future__ import annotations


def expected_experts_touched(experts: int, top_k: int, tokens: int) -> float:
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def max_experts_touched(experts: int, top_k: int, tokens: int) -> int:
    return min(experts, tokens * top_k)
