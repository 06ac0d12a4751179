"""vLLM's packed KV-cache groups: layers of several page sizes laid out block-outermost (DeepSeek-V4).

A model whose attention backend lays its KV cache out block-outermost (vLLM's DeepSeek-V4 backends: its indexer
packs pages side by side; vllm 0.33.0 v1/core/kv_cache_planning.py `validate_kv_cache_layout`) and whose layers
have more than one page size is not unified to one page with padding layers; vLLM groups it
(`_get_packed_kv_cache_groups`, the same in vllm 0.30.0 v1/core/kv_cache_utils.py):

1. **buckets**: each layer joins the first bucket of its type (full attention with the same block size;
   sliding window with the same block size and window; linear-attention state), in layer order;
2. a bucket is **balanced** when each of its page sizes has the same number of layers (a repeating pattern of
   one layer per page size); among balanced buckets, the most layers of one page size in a multi-size bucket is
   the floor of the **repeats per group**, chosen by `_approximate_gcd` over the balanced buckets' counts
   (least total padding, ties to the larger);
3. a balanced bucket splits into cdiv(count, repeats) groups (pattern repeats dealt round-robin), any other stays
   whole; a state bucket (linear-attention state, or sliding window when nothing repeats) is split further to the
   states one block already holds;
4. one block id holds, for the group that draws it, all of that group's pages (`UniformTypeKVCacheSpecs
   .page_size_bytes`), so the pool's bytes per block are the widest group's (`_get_kv_cache_bytes_per_block`),
   and a request needs each group's admission blocks, summed (`get_max_concurrency_for_kv_cache_config`).

Page sizes are each layer's own, rounded up to the layer's alignment (DeepSeek-V4's fp8_ds_mla pages are
576-B aligned: vllm 0.33.0 models/deepseek_v4/compressor.py CompressorStateCache.get_kv_cache_spec
`alignment=576`, kv_cache_interface.py `_apply_alignment_padding`).
"""

from __future__ import annotations

from graphsim.serving.kv_layout import KvGroup, KvKind, LayerKv, cdiv


def layer_page(layer: LayerKv, block_size: int) -> int:
    """One layer's page in bytes at its block size, rounded up to its alignment."""
    page = layer.state_bytes if layer.kind is KvKind.STATE else layer.bytes_per_token * cdiv(block_size, layer.ratio)
    return cdiv(page, layer.alignment) * layer.alignment if layer.alignment else page


def approximate_gcd(values: list[int], lower_bound: int) -> int:
    """The d in [lower_bound, max(values)] that rounds `values` up to multiples of d with the least padding,
    ties to the larger d (vLLM `_approximate_gcd`)."""
    best_d, best_pad = lower_bound, None
    for d in range(max(1, lower_bound), max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_d, best_pad = d, pad
    return best_d


def _bucket_key(layer: LayerKv, block_size: int) -> tuple[object, ...]:
    if layer.kind in (KvKind.FULL, KvKind.MLA):  # FullAttentionSpec.is_uniform_with_collection: any full attention
        return ("full", block_size)
    if layer.kind is KvKind.STATE:
        return ("state",)
    return (layer.kind.value, block_size, layer.window)


def packed_groups(layers: tuple[LayerKv, ...], block_size: int) -> tuple[tuple[KvGroup, ...], list[str]]:
    """vLLM's packed groups of `layers` (the scheduler's `block_size` where a layer fixes none)."""
    buckets: dict[tuple[object, ...], list[LayerKv]] = {}
    for layer in layers:
        buckets.setdefault(_bucket_key(layer, layer.block_size or block_size), []).append(layer)
    plans = []
    for members in buckets.values():
        bs = members[0].block_size or block_size
        by_page: dict[int, list[LayerKv]] = {}
        for layer in members:
            by_page.setdefault(layer_page(layer, bs), []).append(layer)
        counts = [len(v) for v in by_page.values()]
        plans.append((members, bs, by_page, len(set(counts)) == 1, max(counts)))
    floor = max((most for _, _, by_page, balanced, most in plans if balanced and len(by_page) > 1), default=0)
    repeats = approximate_gcd([most for *_, balanced, most in plans if balanced], floor) if floor else None

    def widest(by_page: dict[int, list[LayerKv]], n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in by_page.items())

    def is_state(members: list[LayerKv]) -> bool:
        return members[0].kind is KvKind.STATE or (repeats is None and members[0].kind is KvKind.SLIDING)

    def n_groups(balanced: bool, most: int) -> int:
        return cdiv(most, repeats) if balanced and repeats else 1

    anchor = max(widest(by_page, len(members) if is_state(members) else n_groups(balanced, most))
                 for members, _, by_page, balanced, most in plans)
    groups: list[KvGroup] = []
    for members, bs, by_page, balanced, most in plans:
        n = n_groups(balanced, most)
        if is_state(members):
            per_block = max(anchor // layer_page(members[0], bs), 1)
            n = max(n, cdiv(len(members), per_block))
        if n == 1:
            chunks = [members]
        else:  # the pattern's repeats (one layer of each page size) dealt to the n groups in turn
            repeats_list = list(zip(*by_page.values(), strict=False))
            chunks = [[layer for rep in repeats_list[i::n] for layer in rep] for i in range(n)]
        for chunk in chunks:
            pages = [layer_page(layer, bs) for layer in chunk]
            first = chunk[0]
            groups.append(KvGroup(first.kind, len(chunk), len(chunk), bs, max(pages), first.window,
                                  block_bytes=sum(pages)))
    widest_bytes = max(g.block_bytes or 0 for g in groups)
    notes = [f"{len(groups)} packed KV-cache groups (vLLM _get_packed_kv_cache_groups, block-outermost layout): "
             f"one block id holds the widest group's {widest_bytes:,} B of pages"]
    return tuple(groups), notes
