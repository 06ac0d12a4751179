"""Exact counts for causal (optionally sliding-window) attention over one sequence.

A sequence adds n new tokens after p cached ones. New token i (1-based) sits at position p + i and
attends to min(p + i, W) positions — every earlier position and itself, or the W most recent with a
sliding window W (HF: `kv_idx > q_idx - W`).
"""

from __future__ import annotations


def causal_pairs(new_tokens: int, cached_tokens: int, window: int | None = None) -> int:
    """Σ_{i=1..n} min(p + i, W): (query, key) pairs one head scores. Exact, not n²/2."""
    n, p = new_tokens, cached_tokens
    lo, hi = p + 1, p + n  # attended lengths without a window run lo..hi
    if window is None or window >= hi:
        return n * p + n * (n + 1) // 2
    if window < lo:
        return n * window
    # lengths lo..window grow, the rest are capped at window
    growing = (lo + window) * (window - lo + 1) // 2
    return growing + (hi - window) * window


def cached_tokens_read(new_tokens: int, cached_tokens: int, window: int | None = None) -> int:
    """Cached positions some new token attends to: p, or min(p, W − 1) with a window."""
    if window is None:
        return cached_tokens
    return min(cached_tokens, window - 1)


def new_tokens_kept(new_tokens: int, cached_tokens: int, window: int | None = None) -> int:
    """New positions later steps can still attend to, so their KV must be written: n, or min(n, W − 1)."""
    if window is None:
        return new_tokens
    return min(new_tokens, window - 1)


# --- chunked local attention (Llama-4): position q attends to [C·⌊q/C⌋, q] --------------------------
def _chunk_prefix(x: int, chunk: int) -> int:
    """Σ_{q=0..x-1} (q mod C + 1): pairs of the first x positions."""
    full, rest = divmod(x, chunk)
    return full * chunk * (chunk + 1) // 2 + rest * (rest + 1) // 2


def chunked_pairs(new_tokens: int, cached_tokens: int, chunk: int) -> int:
    """(query, key) pairs one head scores for new positions p .. p+n−1 under chunks of C."""
    return _chunk_prefix(cached_tokens + new_tokens, chunk) - _chunk_prefix(cached_tokens, chunk)


def chunked_cached_read(cached_tokens: int, chunk: int) -> int:
    """Cached positions a new token attends to: those in the first new token's chunk, p mod C."""
    return cached_tokens % chunk


def chunked_new_kept(new_tokens: int, cached_tokens: int, chunk: int) -> int:
    """New positions later tokens can attend to: those in the chunk the next position falls in."""
    end = cached_tokens + new_tokens
    return end - max(cached_tokens, chunk * (end // chunk))


# --- compressed entries (DeepSeek-V4): one entry per closed window of m tokens ------------------------
def closed_entries(position: int, ratio: int) -> int:
    """Entries whose windows have closed once `position` tokens exist: ⌊position / m⌋."""
    return position // ratio


def _visible_prefix(x: int, ratio: int) -> int:
    """Σ_{s=1..x} ⌊s / m⌋: with s = t + 1, the entries queries at positions 0 .. x−1 see in total.
    With x = q·m + r: m·q(q − 1)/2 (the full blocks of m positions see 0, 1, …, q − 1) + q·(r + 1)."""
    q, r = divmod(x, ratio)
    return ratio * q * (q - 1) // 2 + q * (r + 1)


def compressed_pairs(new_tokens: int, cached_tokens: int, ratio: int, topk: int | None = None) -> int:
    """Σ over new positions t = p .. p+n−1 of min(⌊(t + 1) / m⌋, k): (query, compressed entry) pairs one
    head scores (transformers DeepseekV4HCACompressor / CSA block_bias: query t sees entry w iff
    w < (t + 1) // m; CSA keeps the indexer's top-k of those). Exact."""

    def prefix(x: int) -> int:
        if topk is None:
            return _visible_prefix(x, ratio)
        edge = topk * ratio - 1  # s ≤ edge sees fewer than k entries; beyond, exactly k
        if x <= edge:
            return _visible_prefix(x, ratio)
        return _visible_prefix(edge, ratio) + topk * (x - edge)

    n, p = new_tokens, cached_tokens
    return prefix(p + n) - prefix(p)
