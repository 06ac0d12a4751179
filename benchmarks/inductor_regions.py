"""How many kernels Inductor generates for the elementwise / norm regions of a decoder layer between its opaque
kernels (GEMMs, attention, MoE, all-reduce), the evidence for graphsim's `inductor` pass
(graphsim/passes/fuse/vllm_inductor.py, vLLM's default compiled mode).

Each region is a tiny module written as vLLM's `forward_native` paths run it (RMSNorm in fp32 and cast back,
neox rotary indexing a cos/sin cache by position), with the opaque kernels as `torch.mm` (an extern kernel) and
custom ops (Inductor fallback kernels), compiled with `torch.compile(backend="inductor")` on the CPU:

- `--backend cpp` (default): the kernels Inductor's C++ backend generates (`cpp_fused_*`); that backend fuses
  more than Triton (loops of different sizes, one kernel for a whole region), so it is an upper bound on fusion;
- `--backend triton`: the scheduler's fusion decisions with Inductor's Triton scheduling
  (codegen/triton.py TritonScheduling, whose `can_fuse` is codegen/simd.py SIMDScheduling.can_fuse), the GPU's:
  the CPU device is handed that scheduling, and the kernels are counted from the scheduler's nodes after fusion
  (triton itself is not needed: codegen is stopped there). `--combo` adds vLLM's combo kernels
  (vLLM 0.19 config/compilation.py CompilationConfig.__post_init__ sets `combo_kernels` and
  `benchmark_combo_kernel` on GPUs with torch >= 2.9), grouping independent nodes as Inductor's
  ForeachKernelSchedulerNode._default_group_nodes_for_combo_kernels does (without its skip of CPU nodes).

    python benchmarks/inductor_regions.py --backend triton --combo

torch 2.13 (2026-12-01): triton + combo: gemma_attn_in 3 (input norm; q/k/v norms; q/k rotary), gemma_mid 1,
gemma_tail 1, nemotron_moe_in 1, qwen3_attn_in 2 (q/k norms; rotary), llama_layer 4; without combo: 6, 1, 1, 1,
4, 5; cpp: 2, 1, 1, 1, 1, 4. Decode sizes: 64 tokens, per-rank shapes at TP8.
"""

from __future__ import annotations

import argparse
import re

import torch

torch.manual_seed(0)
DT = torch.bfloat16
T = 64  # decode tokens


@torch.library.custom_op("graphsim_bench::all_reduce", mutates_args=())
def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """An opaque collective (vLLM's all-reduce custom op)."""
    return x.clone()


@all_reduce.register_fake
def _all_reduce_fake(x):
    return torch.empty_like(x)


@torch.library.custom_op("graphsim_bench::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """An opaque attention (vLLM's piecewise splitting op)."""
    return q.clone()


@attention.register_fake
def _attention_fake(q, k, v):
    return torch.empty_like(q)


@torch.library.custom_op("graphsim_bench::moe", mutates_args=())
def moe(x: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """An opaque fused MoE."""
    return x.clone()


@moe.register_fake
def _moe_fake(x, logits):
    return torch.empty_like(x)


def rms(x, w=None, eps=1e-6):
    """RMSNorm.forward_native: fp32 math, cast back."""
    orig = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        x = x * w.float()
    return x.to(orig)


def rope(x, cos, sin):
    """RotaryEmbedding.forward_native, neox style (rotate_half)."""
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _p(*shape, dtype=DT):
    return torch.nn.Parameter(torch.randn(*shape, dtype=dtype))


def _cos_sin(cache, pos, hd):
    cs = cache[pos]
    return cs[:, None, :hd // 2], cs[:, None, hd // 2:]


H, NQ, NKV, HD = 2816, 2, 1, 256  # Gemma-4-26B-A4B a rank at TP8 (16 q heads, 8 KV heads, head_dim 256)


class GemmaAttnIn(torch.nn.Module):
    """input_layernorm -> qkv GEMM -> q_norm, k_norm, v_norm (no scale), rotary of q and k -> attention."""

    def __init__(self):
        super().__init__()
        self.w_in, self.wqkv = _p(H), _p((NQ + 2 * NKV) * HD, H)
        self.qn, self.kn, self.cache = _p(HD), _p(HD), _p(8192, HD)

    def forward(self, x, pos):
        q, k, v = (rms(x, self.w_in) @ self.wqkv.t()).split([NQ * HD, NKV * HD, NKV * HD], -1)
        q, k, v = rms(q.view(T, NQ, HD), self.qn), rms(k.view(T, NKV, HD), self.kn), rms(v.view(T, NKV, HD))
        cos, sin = _cos_sin(self.cache, pos, HD)
        return attention(rope(q, cos, sin), rope(k, cos, sin), v)


class GemmaMid(torch.nn.Module):
    """o_proj -> all-reduce -> post_attention_layernorm -> + residual -> pre_feedforward_layernorm -> gate_up GEMM;
    the router's norm x scale x hidden^-0.5 -> router GEMM; pre_feedforward_layernorm_2(residual) -> MoE."""

    def __init__(self):
        super().__init__()
        self.wo, self.w1, self.w2, self.wgu = _p(H, NQ * HD), _p(H), _p(H), _p(2 * 704, H)
        self.rscale, self.wr, self.w3 = _p(H), _p(128, H), _p(H)

    def forward(self, a, res):
        res = res + rms(all_reduce(a.reshape(T, -1) @ self.wo.t()), self.w1)
        gu = rms(res, self.w2) @ self.wgu.t()
        logits = (rms(res) * self.rscale * (H ** -0.5)) @ self.wr.t()
        return gu, moe(rms(res, self.w3), logits), res


class GemmaTail(torch.nn.Module):
    """down_proj -> all-reduce -> post_feedforward_layernorm_1; MoE out -> all-reduce -> post_feedforward_layernorm_2;
    their sum -> post_feedforward_layernorm -> + residual -> x layer_scalar -> next input_layernorm -> qkv GEMM."""

    def __init__(self):
        super().__init__()
        self.wd, self.n1, self.n2, self.n3, self.nin = _p(H, 704), _p(H), _p(H), _p(H), _p(H)
        self.ls, self.wqkv = _p(1), _p(1024, H)

    def forward(self, act, y, res):
        h = rms(rms(all_reduce(act @ self.wd.t()), self.n1) + rms(all_reduce(y), self.n2), self.n3)
        res = (res + h) * self.ls
        return rms(res, self.nin) @ self.wqkv.t(), res


class Qwen3AttnIn(torch.nn.Module):
    """qkv GEMM -> per-head q_norm / k_norm -> rotary of q and k -> attention (Qwen3-8B a rank at TP8)."""

    def __init__(self, h=4096, nq=4, nkv=1, hd=128):
        super().__init__()
        self.nq, self.nkv, self.hd = nq, nkv, hd
        self.wqkv, self.qn, self.kn, self.cache = _p((nq + 2 * nkv) * hd, h), _p(hd), _p(hd), _p(8192, hd)

    def forward(self, h, pos):
        q, k, v = (h @ self.wqkv.t()).split([self.nq * self.hd, self.nkv * self.hd, self.nkv * self.hd], -1)
        q, k = rms(q.view(T, self.nq, self.hd), self.qn), rms(k.view(T, self.nkv, self.hd), self.kn)
        cos, sin = _cos_sin(self.cache, pos, self.hd)
        return attention(rope(q, cos, sin), rope(k, cos, sin), v.view(T, self.nkv, self.hd))


HN = 4096  # Nemotron-3-Super's hidden size (whole on every rank)


class NemotronMoeIn(torch.nn.Module):
    """all-reduce -> + residual -> RMSNorm -> float32 cast -> router GEMM; the normed bf16 -> fc1_latent GEMM."""

    def __init__(self):
        super().__init__()
        self.w, self.wg, self.wl = _p(HN), _p(512, HN, dtype=torch.float32), _p(1024, HN)

    def forward(self, a, res):
        res = res + all_reduce(a)
        h = rms(res, self.w)
        return h.float() @ self.wg.t(), h @ self.wl.t(), res


class LlamaLayer(torch.nn.Module):
    """add + norm -> qkv GEMM -> rotary -> attention -> o_proj -> all-reduce -> add + norm -> gate_up GEMM ->
    SiLU x mul -> down GEMM -> all-reduce (Llama-3-8B-like a rank: 4 q heads, 1 KV head, 128)."""

    def __init__(self, h=4096, nq=4, nkv=1, hd=128, inter=1792):
        super().__init__()
        self.nq, self.nkv, self.hd = nq, nkv, hd
        self.n1, self.n2, self.wqkv, self.wo = _p(h), _p(h), _p((nq + 2 * nkv) * hd, h), _p(h, nq * hd)
        self.wgu, self.wd, self.cache = _p(2 * inter, h), _p(h, inter), _p(8192, hd)

    def forward(self, x, res, pos):
        res = res + x
        q, k, v = (rms(res, self.n1) @ self.wqkv.t()).split([self.nq * self.hd, self.nkv * self.hd,
                                                              self.nkv * self.hd], -1)
        cos, sin = _cos_sin(self.cache, pos, self.hd)
        a = attention(rope(q.view(T, self.nq, self.hd), cos, sin), rope(k.view(T, self.nkv, self.hd), cos, sin),
                      v.view(T, self.nkv, self.hd))
        res = res + all_reduce(a.reshape(T, -1) @ self.wo.t())
        g, u = (rms(res, self.n2) @ self.wgu.t()).chunk(2, -1)
        return all_reduce((torch.nn.functional.silu(g) * u) @ self.wd.t()), res


def _triton_scheduling(combo: bool) -> list:
    """Hand the CPU device Inductor's Triton scheduling and record the scheduler's kernels instead of generating
    code: one entry per fused (or combo) node, extern / fallback kernels left out."""
    import torch._inductor.config as cfg
    import torch._inductor.scheduler as sched
    from torch._inductor.codegen import triton as tcg

    real = getattr(sched, "get_scheduling_for_device")  # noqa: B009 (not exported by torch)
    setattr(sched, "get_scheduling_for_device",  # noqa: B010
            lambda dev: tcg.TritonScheduling if dev == "cpu" else real(dev))
    if combo:
        cfg.combo_kernels = True

        def group(scheduler):
            out = []
            for nodes in scheduler._topological_sort_nodes():
                n = cfg.combo_kernel_max_num_nodes
                out.extend(list(nodes)[i:i + n] for i in range(0, len(nodes), n))
            return out

        sched.ForeachKernelSchedulerNode.group_algorithm_for_combo_kernels = staticmethod(group)
    found: list = []

    def record(self):
        found.append([n for n in self.nodes
                      if not isinstance(n, (sched.ExternKernelSchedulerNode, sched.NopKernelSchedulerNode))])
        raise _Stop()

    sched.Scheduler.codegen = record
    return found


class _Stop(Exception):
    pass


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--backend", choices=("cpp", "triton"), default="cpp")
    ap.add_argument("--combo", action="store_true", help="vLLM's combo kernels (triton backend only)")
    args = ap.parse_args()
    import torch._inductor.config as cfg

    cfg.force_disable_caches = True
    found = _triton_scheduling(args.combo) if args.backend == "triton" else None
    pos = torch.randint(0, 8192, (T,))
    cases = {
        "gemma_attn_in": (GemmaAttnIn(), torch.randn(T, H, dtype=DT), pos),
        "gemma_mid": (GemmaMid(), torch.randn(T, NQ, HD, dtype=DT), torch.randn(T, H, dtype=DT)),
        "gemma_tail": (GemmaTail(), torch.randn(T, 704, dtype=DT), torch.randn(T, H, dtype=DT),
                       torch.randn(T, H, dtype=DT)),
        "nemotron_moe_in": (NemotronMoeIn(), torch.randn(T, HN, dtype=DT), torch.randn(T, HN, dtype=DT)),
        "qwen3_attn_in": (Qwen3AttnIn(), torch.randn(T, 4096, dtype=DT), pos),
        "llama_layer": (LlamaLayer(), torch.randn(T, 4096, dtype=DT), torch.randn(T, 4096, dtype=DT), pos),
    }
    for name, (mod, *inputs) in cases.items():
        torch._dynamo.reset()
        if found is None:
            from torch._inductor.utils import run_and_get_code

            with torch.no_grad():
                _, codes = run_and_get_code(torch.compile(mod, backend="inductor", dynamic=False), *inputs)
            kernels = re.findall(r"^(cpp_fused_\w+) = async_compile", "\n".join(codes), re.M)
            print(f"{name}: {len(kernels)} kernels (cpp): {', '.join(kernels)}")
            continue
        found.clear()
        try:
            with torch.no_grad():
                torch.compile(mod, backend="inductor", dynamic=False)(*inputs)
        except Exception:  # the recorder stops codegen
            if not found:
                raise
        print(f"{name}: {len(found[0])} kernels (triton scheduling{', combo' if args.combo else ''})")


if __name__ == "__main__":
    main()
