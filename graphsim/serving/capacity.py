"""KV-cache capacity from the bytes available for it, in the terms vLLM logs.

vLLM 0.33.0:
- `num_blocks = available_memory // bytes_per_block` (`get_kv_cache_config_from_groups`,
  vllm/v1/core/kv_cache_planning.py);
- `max_concurrency = num_blocks / Σ_groups cdiv(max_memory_usage_bytes, page_size_bytes)` for one
  request of `max_model_len` tokens (`get_max_concurrency_for_kv_cache_config`,
  vllm/v1/core/kv_cache_utils.py);
- `GPU KV cache size: int(max_concurrency · max_model_len) tokens, Maximum concurrency for L tokens
  per request: X.XXx` (`get_kv_cache_capacity`, `update_kv_cache_capacity`, same file). The token
  figure is max_concurrency × max_model_len, so with sliding windows or state it is not
  `num_blocks × block_size`.
- A sliding-window group reserves `cdiv(min(W − 1 + max_in_flight_tokens, L), block) + 1` blocks
  per request, `max_in_flight_tokens = max_concurrent_batches × max_num_batched_tokens`, and
  `max_concurrent_batches` is 2 with async scheduling, the default (vllm/config/vllm.py).

Older versions (`EngineProfile`, engine_versions.py, which names where each was read):
- V1 before 0.25: `GPU KV cache size: num_blocks // len(kv_cache_groups) × min block_size tokens`
  (`get_kv_cache_config`, vllm/v1/core/kv_cache_utils.py 0.10.1 / 0.20.0), two log lines before 0.30, and
  the sliding reservation over one `max_num_batched_tokens` before 0.30.
- V0 (≤ 0.7): every layer paged at full length, `bytes_per_block = block_size × bytes per token of all
  layers`; `# GPU blocks: N, # CPU blocks: M` (M from the 4 GiB swap space) and
  `Maximum concurrency for L tokens per request: N × block_size / L` (vllm/executor/gpu_executor.py
  `initialize_cache`, 0.6.3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graphsim.errors import GraphsimError
from graphsim.serving.engine_versions import NEWEST_PROFILE, V0_SWAP_SPACE_GIB, EngineProfile
from graphsim.serving.kv_layout import KvLayout, cdiv

GiB = 1 << 30


class CapacityError(GraphsimError):
    """The KV cache cannot hold what the deployment asks of it."""


@dataclass(frozen=True)
class KvCapacity:
    available_bytes: int  # per rank
    bytes_per_block: int
    num_blocks: int
    max_model_len: int
    blocks_per_request: int  # at max_model_len, summed over groups
    in_flight_tokens: int
    profile: EngineProfile = NEWEST_PROFILE  # whose formulas and log lines
    num_groups: int = 1
    block_size: int = 16  # the smallest block size of the groups

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request if self.blocks_per_request else float("inf")

    @property
    def tokens(self) -> int:
        """vLLM's "GPU KV cache size": int(max_concurrency × max_model_len) from 0.25; before, num_blocks //
        groups × block_size (V1) or num_blocks × block_size (V0)."""
        formula = self.profile.kv_tokens_formula
        if formula == "concurrency":
            return int(self.max_concurrency * self.max_model_len)
        if formula == "groups":
            return self.num_blocks // max(self.num_groups, 1) * self.block_size
        return self.num_blocks * self.block_size

    @property
    def cpu_blocks(self) -> int:
        """V0's CPU swap blocks: `swap_space` GiB // bytes per block (Worker.determine_num_available_blocks)."""
        return V0_SWAP_SPACE_GIB * GiB // self.bytes_per_block if self.bytes_per_block else 0

    @property
    def fits_one_request(self) -> bool:
        return self.num_blocks >= self.blocks_per_request

    def vllm_log_lines(self) -> tuple[str, str]:
        """The two figures the profile's vLLM version logs at start-up (V0: its block counts and concurrency,
        max_model_len printed without separators)."""
        if self.profile.engine == "sglang":  # model_runner: the pool and the limits the scheduler prints
            return (f"max_total_num_tokens={self.tokens}",
                    f"context_len={self.max_model_len}, max concurrency at context_len: {self.max_concurrency:.2f}x")
        if self.profile.engine == "trtllm":  # KVCacheManager: blocks of tokens_per_block
            return (f"[MemUsageChange] Allocated {self.available_bytes / GiB:.2f} GiB for max tokens in paged KV cache "
                    f"({self.tokens})", f"max_seq_len {self.max_model_len}: {self.max_concurrency:.2f}x")
        if self.profile.family == "v0":
            return (f"# GPU blocks: {self.num_blocks}, # CPU blocks: {self.cpu_blocks}",
                    f"Maximum concurrency for {self.max_model_len} tokens per request: {self.max_concurrency:.2f}x")
        return (f"GPU KV cache size: {self.tokens:,} tokens",
                f"Maximum concurrency for {self.max_model_len:,} tokens per request: {self.max_concurrency:.2f}x")

    def vllm_log_verbatim(self) -> tuple[str, ...]:
        """The start-up lines as that version prints them: one line from 0.30 (`update_kv_cache_capacity`), two
        before."""
        a, b = self.vllm_log_lines()
        return (f"{a}, {b}",) if self.profile.family != "v0" and self.profile.kv_log_one_line else (a, b)

    def to_json(self) -> dict[str, object]:
        return {"available_bytes": self.available_bytes, "available_gib": self.available_bytes / GiB,
                "bytes_per_block": self.bytes_per_block, "num_blocks": self.num_blocks,
                "max_model_len": self.max_model_len, "blocks_per_request": self.blocks_per_request,
                "in_flight_tokens": self.in_flight_tokens, "tokens": self.tokens,
                "max_concurrency": self.max_concurrency, "fits_one_request": self.fits_one_request,
                "engine": self.profile.name, "vllm_log": list(self.vllm_log_lines()),
                "vllm_log_verbatim": list(self.vllm_log_verbatim())}


def kv_capacity(layout: KvLayout, available_bytes: int, max_model_len: int, in_flight_tokens: int,
                profile: EngineProfile = NEWEST_PROFILE) -> KvCapacity:
    """Blocks and concurrency of `available_bytes` per rank with `profile`'s paging (V0: every layer at full
    length, one block size; V1: `layout`'s KV-cache groups)."""
    if max_model_len < 1:
        raise CapacityError(f"max_model_len {max_model_len}; give --max-model-len >= 1")
    if not layout.bytes_per_token and not layout.bytes_per_block:
        # (vLLM gives a model without KV cache specs no memory for one: vllm/v1/engine/core.py
        # EngineCore._initialize_kv_caches, "Attention free models don't need memory for kv cache"; a model with
        # neither KV nor state of its own is a drafter reading its target's, whose capacity is the target's)
        raise CapacityError("this model keeps no KV cache or recurrent state of its own (every layer reads another "
                            "model's: a speculative drafter); size and serve its target, with this model as the "
                            "draft (--speculative-config)")
    if not profile.hybrid_kv:
        per_block = layout.block_size * layout.bytes_per_token
        blocks = max(0, int(available_bytes)) // per_block if per_block else 0
        return KvCapacity(int(available_bytes), per_block, blocks, max_model_len, cdiv(max_model_len, layout.block_size),
                          in_flight_tokens, profile, 1, layout.block_size)
    per_block = layout.bytes_per_block
    blocks = max(0, int(available_bytes)) // per_block if per_block else 0
    return KvCapacity(int(available_bytes), per_block, blocks, max_model_len,
                      layout.admission_blocks(max_model_len, in_flight_tokens), in_flight_tokens, profile,
                      max(len(layout.groups), 1), layout.block_size)


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
          "tib": 1 << 40}


def parse_bytes(text: str, default_unit: str = "GiB") -> int:
    """`17.78GiB`, `17.78` (GiB), `19090000000B`, `16GB` → bytes. vLLM logs memory in GiB."""
    m = _SIZE.match(str(text))
    if not m:
        raise CapacityError(f"cannot read memory size '{text}'; write e.g. 17.78GiB, 16GB or 19090000000B")
    unit = (m.group(2) or default_unit).lower()
    return int(float(m.group(1)) * _UNITS[unit])
