"""The step being accounted: groups of identical sequences, each with new and cached tokens.

Workload strings:
- `N@P`: prefill — one sequence of N new tokens after P cached tokens (`8192@0`).
- `BxC`: decode — B sequences, each one new token after C cached tokens (`256x4096`); the new
  token attends to C + 1 positions (the C cached ones and itself).
Several of them together form one mixed step. Digits may carry `_` or `,` separators and a
`k`/`K` (×1024) suffix: `8k@0`, `64x32k`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graphsim.errors import GraphsimError


class WorkloadError(GraphsimError):
    """A malformed or impossible workload string."""


# Bounds on a batch spec, far above anything servable: a sequence longer than 2³¹ tokens is beyond any context
# window (the trace reader's bound too, serving.requests.MAX_TOKENS); 2⁴⁰ token positions in one batch would need
# over 1 TiB of KV cache even at one byte a token, more than the GPU memory of any node.
MAX_SEQ_TOKENS = 1 << 31
MAX_BATCH_TOKENS = 1 << 40


@dataclass(frozen=True)
class SeqGroup:
    """`count` sequences, each adding `new_tokens` after `cached_tokens` already in its cache."""

    new_tokens: int
    cached_tokens: int
    count: int = 1

    def __post_init__(self) -> None:
        if self.new_tokens < 1 or self.cached_tokens < 0 or self.count < 1:
            raise WorkloadError(
                f"invalid sequence group (new={self.new_tokens}, cached={self.cached_tokens}, count={self.count}); "
                "new tokens and count must be >= 1, cached tokens >= 0"
            )
        if self.new_tokens + self.cached_tokens > MAX_SEQ_TOKENS or self.count * (
                self.new_tokens + self.cached_tokens) > MAX_BATCH_TOKENS:
            raise WorkloadError(
                f"sequence group (new={self.new_tokens:,}, cached={self.cached_tokens:,}, count={self.count:,}) is out "
                f"of range: at most {MAX_SEQ_TOKENS:,} tokens a sequence and {MAX_BATCH_TOKENS:,} in a batch")

    @property
    def total_new_tokens(self) -> int:
        return self.new_tokens * self.count

    def label(self) -> str:
        if self.new_tokens == 1:
            return f"{self.count}x{self.cached_tokens}"
        text = f"{self.new_tokens}@{self.cached_tokens}"
        return text if self.count == 1 else f"{self.count}*{text}"


@dataclass(frozen=True)
class Step:
    """One forward step over a batch of sequence groups (prefill, decode, or mixed)."""

    groups: tuple[SeqGroup, ...]

    def __post_init__(self) -> None:
        if not self.groups:
            raise WorkloadError("empty step; give at least one --prefill N@P or --decode BxC")

    @property
    def tokens(self) -> int:
        """T: new tokens in the step (rows every per-token matmul sees)."""
        return sum(g.total_new_tokens for g in self.groups)

    @property
    def sequences(self) -> int:
        return sum(g.count for g in self.groups)

    def label(self) -> str:
        return " + ".join(g.label() for g in self.groups)


_NUM = r"(\d[\d_,]*[kK]?)"
_PREFILL = re.compile(rf"^(?:{_NUM}\*)?{_NUM}@{_NUM}$")
_DECODE = re.compile(rf"^{_NUM}[xX]{_NUM}$")


def _int(text: str) -> int:
    scale = 1024 if text[-1] in "kK" else 1
    digits = text.rstrip("kK").replace("_", "").replace(",", "")
    return int(digits) * scale


def parse_prefill(text: str) -> SeqGroup:
    """`N@P` (or `K*N@P` for K identical sequences)."""
    m = _PREFILL.match(text.strip())
    if not m:
        raise WorkloadError(f"malformed prefill '{text}'; expected N@P, e.g. 8192@0 (N new tokens after P cached)")
    count = _int(m.group(1)) if m.group(1) else 1
    return SeqGroup(new_tokens=_int(m.group(2)), cached_tokens=_int(m.group(3)), count=count)


def parse_decode(text: str) -> SeqGroup:
    """`BxC`: B sequences, one new token each, after C cached tokens."""
    m = _DECODE.match(text.strip())
    if not m:
        raise WorkloadError(f"malformed decode '{text}'; expected BxC, e.g. 256x4096 (B sequences at context C)")
    return SeqGroup(new_tokens=1, cached_tokens=_int(m.group(2)), count=_int(m.group(1)))


def parse_step(prefill: list[str] | tuple[str, ...] = (), decode: list[str] | tuple[str, ...] = ()) -> Step:
    groups = [parse_prefill(p) for p in prefill] + [parse_decode(d) for d in decode]
    return Step(tuple(groups))


_BATCH = re.compile(rf"^{_NUM}[xX]{_NUM}(?:@{_NUM})?$")


def _batch_item(text: str, kind: str, spec: str) -> SeqGroup:
    m = _BATCH.match(text.strip())
    if not m:
        raise WorkloadError(f"malformed batch spec '{spec}': '{text}' is not BxN[@P]; "
                            "e.g. prefill:1x2048, decode:64x2048, mixed:1x512@0+32x1024")
    count, n, p = _int(m.group(1)), _int(m.group(2)), m.group(3)
    if kind == "decode" or (kind == "mixed" and p is None):
        if p is not None:
            raise WorkloadError(f"malformed batch spec '{spec}': decode takes BxC (C = cached context), not '@'")
        return SeqGroup(new_tokens=1, cached_tokens=n, count=count)
    return SeqGroup(new_tokens=n, cached_tokens=_int(p) if p else 0, count=count)


def parse_batch_spec(spec: str) -> Step:
    """`prefill:BxN[@P]`, `decode:BxC` or `mixed:ITEM+ITEM…` (an item with `@` is a prefill group
    BxN@P, one without is a decode group BxC) → one Step."""
    kind, sep, rest = spec.strip().partition(":")
    if not sep or kind not in ("prefill", "decode", "mixed") or not rest:
        raise WorkloadError(f"malformed batch spec '{spec}'; expected prefill:BxN[@P], decode:BxC or "
                            "mixed:BxN@P+BxC")
    items = rest.split("+") if kind == "mixed" else [rest]
    return Step(tuple(_batch_item(i, kind, spec) for i in items))
