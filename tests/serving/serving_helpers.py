"""Shared helpers: an affine iteration cost (no tree, fast) and small deployments for scheduler tests."""

from __future__ import annotations

import numpy as np

from graphsim.catalog import resolve_model
from graphsim.costing.interpolate import ROOFLINE
from graphsim.serving import EngineConfig, ParallelConfig, SimulationSetup, kv_layout
from graphsim.work import accounting


class AffineCost:
    """t = base + per_token·T + per_seq·S + per_ctx·(Σ context read): a stand-in with the right shape."""

    def __init__(self, base_us=5000.0, per_token_us=0.05, per_seq_us=2.0, per_ctx_us=0.0005):
        self.base, self.tok, self.seq, self.ctx = base_us, per_token_us, per_seq_us, per_ctx_us
        self.calls = 0

    def step_us(self, tokens, seqs, dec_count, dec_ctx_mean, chunks):
        self.calls += 1
        ctx = dec_count * (dec_ctx_mean + 1) + sum(n * (p + n / 2) / 64 for n, p in chunks)
        return self.base + self.tok * tokens + self.seq * seqs + self.ctx * ctx, ROOFLINE

    def decode_run_us(self, batch, ctx_mean0, k):
        c = ctx_mean0 + np.arange(k, dtype=np.float64)
        t = self.base + self.tok * batch + self.seq * batch + self.ctx * batch * (c + 1)
        return t, np.full(k, ROOFLINE, dtype=np.int8)


def llama_layout(tp=1, block_size=None):
    acc = accounting(resolve_model("llama-3.1-8b").config)
    return kv_layout(acc.spec, acc.precision, tp, block_size)


def small_setup(num_blocks=2000, max_num_seqs=64, mnbt=2048, mml=8192, replicas=1, router="round-robin",
                caching=True, chunked=True, cost=None, fast_forward=True, layout=None, tp=1):
    cfg = EngineConfig(mnbt, max_num_seqs, mml, enable_prefix_caching=caching, enable_chunked_prefill=chunked)
    return SimulationSetup(cfg, layout or llama_layout(), num_blocks, cost or AffineCost(),
                           ParallelConfig(tensor_parallel_size=tp, data_parallel_size=replicas), router, fast_forward)
