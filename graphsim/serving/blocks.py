"""The pool of KV-cache blocks of one engine, with prefix caching on full blocks.

Counts, not block objects: `used` blocks are held by running requests; the rest are free, and some
free blocks still hold cached content that a later request may hit (evictable, in LRU order).
Allocation takes never-cached free blocks first, then evicts the least recently freed cached ones
(vLLM's `FreeKVCacheBlockQueue` pops from the head and appends freed blocks at the tail; initially
every block is at the head, uncached, so this is the same order for all but the blocks freed without
content, which vLLM queues behind cached ones).

Cached content has two forms:
- a shared-prefix block `(prefix_id, i)`: block i of a prompt prefix several requests share; held
  with a reference count while requests use it, evictable when none do;
- a run `("run", request id)`: the full blocks a preempted request had computed beyond its shared
  prefix, kept so its recompute can hit them (vLLM frees a request's blocks in reverse order, so a
  run is evicted from its end).

A finished request's blocks past its shared prefix (its output, or a prompt without a prefix key) are
content no later request of the workload names, yet in vLLM they queue for eviction like any other
freed block: `BlockPool.free_blocks` appends every freed block, hashed or not, at the free queue's tail,
and `SingleTypeKVCacheManager.free` frees a request's blocks in reverse order (vllm 0.10.1
v1/core/block_pool.py, v1/core/single_type_kv_cache_manager.py), so they go before its prefix blocks and
after every block freed earlier. `queue_freed` keeps them there (an entry that nothing hits), so a later
allocation evicts the least recently freed content, not those blocks first.

`snapshot()` / `restore()` hand the cached content over to an engine that starts later on the same server
(`PrefixCache`): the shared blocks keep their keys, the other entries become anonymous ones that keep their
place in the queue.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass


class _Entry:
    """The tag of a queue entry that no request's prefix key can equal (prefix ids are strings)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


FREED = _Entry("freed")  # (FREED, request id): a finished request's own blocks, queued (queue_freed)
STALE = _Entry("stale")  # (STALE, k): an entry of an earlier workload on the same engine (restore)

PoolEntries = tuple[tuple[Hashable, int], ...]  # (key, blocks), least recently freed first


@dataclass(frozen=True)
class PrefixCache:
    """The free, cached content of each engine's block pool when a workload ended (`BlockPool.snapshot`, one
    per engine in index order), for the next workload on the same engines (`SimulationSetup.prefix_cache`)."""

    engines: tuple[PoolEntries, ...]

    def shared_keys(self, engine: int = 0) -> list[Hashable]:
        """The shared-prefix block keys an engine holds, least recently freed first."""
        return [k for k, _ in self.engines[engine] if not _opaque(k)]

    def blocks(self, engine: int = 0) -> int:
        return sum(n for _, n in self.engines[engine])


def _opaque(key: Hashable) -> bool:
    return isinstance(key, tuple) and len(key) == 2 and (key[0] in (FREED, STALE) or key[0] == "run")


class BlockPool:
    def __init__(self, num_blocks: int, caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.caching = caching
        self.used = 0
        self._evictable: OrderedDict[Hashable, int] = OrderedDict()  # key → blocks (runs: count)
        self._evictable_total = 0
        self._run_start: dict[int, int] = {}  # request id → first block index of its cached run
        self.shared_ref: dict[Hashable, int] = {}
        self.evicted = 0

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    @property
    def cached_free(self) -> int:
        return self._evictable_total

    # --- plain blocks ----------------------------------------------------------------------------
    def alloc(self, n: int) -> None:
        if n <= 0:
            return
        if n > self.free:
            raise AssertionError(f"over-allocation: {n} blocks asked, {self.free} free")
        anon = self.free - self._evictable_total
        self.used += n
        self._evict(n - min(n, anon))

    def release(self, n: int) -> None:
        if n > 0:
            self.used -= n
            assert self.used >= 0

    def _evict(self, n: int) -> None:
        while n > 0:
            key, count = next(iter(self._evictable.items()))
            if count <= n:
                self._evictable.popitem(last=False)
                if isinstance(key, tuple) and key[0] == "run":
                    del self._run_start[key[1]]
                taken = count
            else:
                self._evictable[key] = count - n
                taken = n
            self._evictable_total -= taken
            self.evicted += taken
            n -= taken

    # --- shared prefix blocks ----------------------------------------------------------------------
    def is_cached(self, key: Hashable) -> bool:
        return key in self.shared_ref or key in self._evictable

    def is_evictable(self, key: Hashable) -> bool:
        return key in self._evictable

    def acquire(self, key: Hashable) -> None:
        """Use a cached shared block (a hit): a reference if in use, else take it out of the free queue."""
        if key in self.shared_ref:
            self.shared_ref[key] += 1
            return
        del self._evictable[key]
        self._evictable_total -= 1
        self.used += 1
        self.shared_ref[key] = 1

    def register(self, key: Hashable) -> bool:
        """A request's own (already counted) block becomes the cached copy of `key`; False if one exists."""
        if not self.caching or self.is_cached(key):
            return False
        self.shared_ref[key] = 1
        return True

    def release_shared(self, key: Hashable) -> None:
        ref = self.shared_ref[key] - 1
        if ref:
            self.shared_ref[key] = ref
            return
        del self.shared_ref[key]
        self.used -= 1
        self._evictable[key] = 1
        self._evictable_total += 1

    def warm(self, keys: Iterable[Hashable]) -> None:
        """Shared blocks a server computed before this run, free and cached, the last given the most recently
        freed; when they outnumber the pool, the earliest are the ones evicted (LRU)."""
        if not self.caching:
            return
        for key in keys:
            if self.is_cached(key):
                continue
            if self._evictable_total >= self.free:  # the pool is full of them: the earliest goes
                self._evictable.popitem(last=False)
                self._evictable_total -= 1
            self._evictable[key] = 1
            self._evictable_total += 1

    def queue_freed(self, rid: int, count: int) -> None:
        """A finished request's own `count` blocks (already released) queue for eviction as content nothing
        hits: behind every block freed before them (vLLM's free queue; see the module's docstring)."""
        if not self.caching or count <= 0:
            return
        self._evictable[(FREED, rid)] = count
        self._evictable_total += count

    def snapshot(self) -> PoolEntries:
        """The free, cached content in eviction order (the first goes first); the entries no later workload can
        hit (runs of preempted requests, finished requests' own blocks) become anonymous ones that keep their
        place. Held blocks are not in it: take it when no request holds blocks."""
        out: list[tuple[Hashable, int]] = []
        for key, count in self._evictable.items():
            out.append(((STALE, len(out)), count) if _opaque(key) else (key, count))
        return tuple(out)

    def restore(self, entries: PoolEntries) -> None:
        """Start from an earlier workload's `snapshot()` (an empty pool only). A snapshot from a larger pool
        keeps its most recently freed blocks (the oldest are the ones evicted)."""
        if self.used or self._evictable:
            raise AssertionError("restore() needs an empty pool")
        if not self.caching:
            return
        room = self.num_blocks
        kept: list[tuple[Hashable, int]] = []
        for key, count in reversed(entries):
            if room <= 0:
                break
            take = min(count, room)
            kept.append((key, take))
            room -= take
        for key, count in reversed(kept):
            self._evictable[key] = count
            self._evictable_total += count

    # --- runs of a preempted request ---------------------------------------------------------------
    def cache_run(self, rid: int, start: int, count: int) -> None:
        if not self.caching or count <= 0:
            return
        self._evictable[("run", rid)] = count
        self._run_start[rid] = start
        self._evictable_total += count

    def run(self, rid: int) -> tuple[int, int] | None:
        start = self._run_start.get(rid)
        return None if start is None else (start, self._evictable[("run", rid)])

    def take_run(self, rid: int, blocks: int) -> None:
        """Hit the first `blocks` blocks of a request's cached run; the rest of the run is dropped."""
        count = self._evictable.pop(("run", rid))
        del self._run_start[rid]
        self._evictable_total -= count
        self.used += blocks
