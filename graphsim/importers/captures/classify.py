"""Name → kind of work, for measured launches.

GPU kernels are classified from their (demangled) names with ordered regular-expression rules
over the kernels vLLM, PyTorch, cuBLAS/CUTLASS, FlashAttention/FlashInfer, NCCL and Triton
(Inductor) launch; the first rule that matches wins. CPU-only traces list aten ops; those are
mapped through the importer's aten table (`importers/aten_map.py`) and whether the op did real
work (a `reshape` that copies vs. one that only re-describes memory) is read from its children.

Engine plumbing — memcpy, memset, fills, sampling, view ops, host bookkeeping — is named as such,
so alignment can set it aside while still accounting for its time.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from graphsim.capture import LaunchClass as C
from graphsim.importers.aten_map import ATEN_OPS
from graphsim.ir import Op, OpGroup
from graphsim.ir.ops import VIEW_LIKE

# ---- GPU kernel names ------------------------------------------------------------------------

# (pattern, reason, whether the pattern may match anywhere in the full name, templates included)
_PLUMBING: list[tuple[re.Pattern[str], str, bool]] = [
    (re.compile(r"memcpy|memcopy"), "memcpy", True),
    (re.compile(r"memset"), "memset", True),
    (re.compile(r"fillfunctor|fill_kernel|\bfill_|zero_kernel"), "fill", True),
    (re.compile(r"argmaxops|argminops|exponential_kernel|multinomial|radixsort|gumbel"), "sampling", True),
    (re.compile(r"argmax|argmin|exponential|multinomial|sampl|gumbel|radixsort|radix_sort|segmented_?sort|"
                r"top_?k_?top_?p|top_?p_|min_p|penalt|logits_?processor|temperature|bitonicsort"), "sampling", False),
    (re.compile(r"prepare_inputs|advance_step|slot_mapping|block_table|compute_.*positions"), "input prep", False),
]

# launch class → the kernel-name pattern that marks it, in the order they are tried
_PATTERNS: dict[C, str] = {
    C.COLLECTIVE: r"nccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|cross_device_reduce|custom_?ar_|"
                  r"one_?shot_?(all)?reduce|two_?shot|multimem|sendrecv",
    C.MOE_ROUTER: r"topk_?gating_?softmax|topk_?softmax|grouped_?topk|moe_fused_gate|noaux_tc|topk_?sigmoid",
    C.MOE_AUX: r"moe_align|count_and_sort|moe_sum|sort_tokens|shuffle_rows|moe_permute|moe_unpermute|expert_map|"
               r"compute_expert_offsets|expand_.*expert|finalize_moe",
    C.MOE: r"fused_moe|moe_gemm|cutlass_moe|moe_mm|marlin_moe|moe_kernel|grouped_gemm|group_gemm|"
           r"batched_?gemm_.*expert|experts?_gemm",
    C.ATTENTION_AUX: r"splitkv_combine|merge_attn_states|merge_state|combine_attn|reduce_segments|"
                     r"paged_attention_v2_reduce|attention_reduce",
    C.KV_CACHE_WRITE: r"reshape_and_cache|concat_and_cache|store_kvcache|set_kv_buffer|append_paged_kv|kv_cache_write",
    C.LINEAR_ATTENTION: r"gated_delta|delta_rule|fused_recurrent|chunk_scaled_dot_kkt|solve_tril|recompute_w_u|"
                        r"chunk_fwd_kernel_o|chunk_gla",
    C.ATTENTION: r"flash_?fwd|flash_?attn|flash::|fmha|flashinfer|batch_?prefill|batch_?decode|single_?prefill|"
                 r"single_?decode|paged_attention|attention|_attn_|unified_attention|scaled_dot_product|sdpa|"
                 r"mla_|cudnn.*mha|xformers|efficient_attention|decode_attention|prefill_attention",
    C.CONV1D: r"causal_conv1d|conv1d|conv_depthwise",
    C.NORM: r"rms_?norm|layer_?norm|group_?norm|norm_kernel|welford",
    C.ROTARY: r"rotary|\brope|_rope|rope_",
    C.ACT_AND_MUL: r"act_and_mul|silu_and_mul|gelu_and_mul|gelu_tanh_and_mul|swiglu|geglu|silu_mul|mul_and_silu",
    C.GEMM_AUX: r"splitk_?reduce|split_k_reduce|reduce_1block_kernel",
    C.GEMM: r"gemm|gemv|xmma|nvjet|cublas|cutlass|s16816|h16816|s1688|hmma|wgmma|_mm_kernel|matmul|scaled_mm|"
            r"deep_?gemm|marlin|machete|bmm|addmm|\bmm_",
    C.EMBEDDING: r"embedding|embed",
    C.ELEMENTWISE: r"elementwise|functor|vectorized|unrolled|reduce_kernel|softmax|catarray|cat_|copy|index|gather|"
                   r"scatter|where|cumsum|sort|topk|transpose|permute|triton_|kernel",
}
_RULES: list[tuple[re.Pattern[str], C]] = [(re.compile(pattern), klass) for klass, pattern in _PATTERNS.items()]

_FUNCTOR = re.compile(r"cudafunctor_?(\w+?)[<>,]|(\w+?)_?functor|at::native::(?:\w+::)*(\w+?)_kernel_cuda")
_KNOWN_OPS = ("add", "sub", "mul", "div", "neg", "pow", "rsqrt", "sqrt", "exp", "log", "silu", "gelu", "relu",
              "sigmoid", "tanh", "sin", "cos", "where", "copy", "cat", "softmax", "mean", "sum", "max", "index",
              "gather", "scatter", "cumsum", "sort", "topk", "abs", "clamp", "fill")


def short_kernel_name(name: str) -> str:
    """`void ns::kern<T, 4>(int, float*)` → `ns::kern`: no return type, template arguments or parameters."""
    s = name.strip().replace("(anonymous namespace)", "anon")
    if s.startswith("["):
        return s
    if s.startswith("void "):
        s = s[5:]
    depth = 0
    out = []
    for ch in s:
        if ch in "<(":
            if depth == 0 and out:
                break
            depth += 1
            continue
        if ch in ">)":
            depth = max(0, depth - 1)
            continue
        if depth == 0:
            out.append(ch)
    short = "".join(out).strip() or s
    return short.split(" ")[-1] if " " in short and "::" not in short.split(" ")[-1] else short


def _inductor(short: str) -> tuple[C, str]:
    """Triton kernels generated by Inductor: `triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0`."""
    parts = set(re.split(r"_+", short))
    if short.startswith("triton_tem"):
        return C.GEMM, "mm"
    if "rsqrt" in parts and ("mean" in parts or "var" in parts):
        return C.NORM, "fused_add_rms_norm" if "add" in parts else "rms_norm"
    if parts & {"silu", "gelu", "sigmoid"} and "mul" in parts and len(parts & {"cos", "sin"}) == 0:
        return C.ACT_AND_MUL, "silu_and_mul" if "silu" in parts or "sigmoid" in parts else "gelu_and_mul"
    if {"cos", "sin"} & parts or "rotary" in parts:
        return C.ROTARY, "rotary"
    return C.ELEMENTWISE, "fused"


def _elementwise_op(full: str) -> str:
    low = full.lower()
    m = _FUNCTOR.search(low)
    if m:
        name = next(g for g in m.groups() if g)
        for op in _KNOWN_OPS:
            if op in name:
                return op
        return name
    for op in ("indexselect", "catarray", "copy", "softmax", "index", "gather", "scatter", "cumsum", "sort", "topk", "where"):
        if op in low:
            return {"catarray": "cat", "indexselect": "index"}.get(op, op)
    return ""


def classify_kernel(name: str) -> tuple[C, str, str, str]:
    """A GPU kernel name → (class, canonical op, display label, plumbing reason)."""
    short = short_kernel_name(name)
    low_short, low = short.lower(), name.lower()
    label = short.split("::")[-1] if short.startswith("at::native::") else short
    for pat, reason, anywhere in _PLUMBING:
        if pat.search(low_short) or (anywhere and pat.search(low)):
            if reason in ("memcpy", "memset"):
                label = name.split("(")[0].strip() or name
            elif reason not in label.lower():
                label = f"{label}[{reason}]"
            return C.PLUMBING, reason, label, reason
    if re.match(r"triton_(poi|red|per|tem)_", low_short):
        klass, op = _inductor(low_short)
        return klass, op, label, ""
    for pat, klass in _RULES:
        if pat.search(low_short):
            op = _kernel_op(klass, low_short, name)
            if klass is C.ELEMENTWISE and op:
                label = f"{label}[{op}]"
            return klass, op, label, ""
    return C.OTHER, "", label, ""


def _kernel_op(klass: C, low_short: str, full: str) -> str:
    if klass is C.NORM:
        if "fused_add" in low_short:
            return "fused_add_rms_norm"
        return "layer_norm" if "layer" in low_short else "rms_norm"
    if klass is C.ACT_AND_MUL:
        if "act_and_mul" in low_short:
            inner = re.search(r"(silu|gelu_tanh|gelu|relu)", full.lower())
            return f"{inner.group(1)}_and_mul" if inner else "silu_and_mul"
        for a in ("gelu_tanh", "gelu", "silu", "swiglu", "geglu"):
            if a in low_short:
                return {"swiglu": "silu", "geglu": "gelu"}.get(a, a) + "_and_mul"
    if klass is C.ROTARY:
        return "rotary"
    if klass is C.EMBEDDING:
        return "embedding"
    if klass is C.ELEMENTWISE:
        return _elementwise_op(full)
    if klass is C.COLLECTIVE:
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            if op.replace("_", "") in low_short.replace("_", ""):
                return op
        return "all_reduce" if "reduce" in low_short else ""
    return klass.value


# ---- CPU aten ops ----------------------------------------------------------------------------

_ATTENTION_OPS = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
                  "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                  "_scaled_dot_product_attention_math", "_flash_attention_forward", "attention"}
_NOOP_UNLESS_WORK = {"to", "type_as", "contiguous", "reshape", "flatten", "expand_as", "view_as", "repeat_interleave"}
_HOST = {"item", "_local_scalar_dense", "is_nonzero", "resize_", "set_", "record_stream", "lift_fresh", "detach_",
         "detach", "alias", "as_strided", "empty", "empty_strided", "empty_like", "new_empty", "size", "stride",
         "numel", "is_same_size", "result_type", "_has_compatible_shallow_copy_type", "_assert_async",
         "_assert_tensor_metadata", "sym_size", "_unsafe_view", "unfold", "split", "chunk", "unbind",
         "split_with_sizes", "narrow", "expand", "t", "numpy_T", "_reshape_alias", "view_as_real", "view_as_complex"}
_FILL = {"fill_", "zero_", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "new_zeros", "new_ones",
         "new_full", "scalar_tensor"}
_WORKLESS = _HOST | _FILL | {"arange", "view", "reshape", "transpose", "permute", "unsqueeze", "squeeze", "select",
                             "slice", "to", "type_as", "contiguous", "flatten", "expand_as", "view_as"}


def aten_packet(name: str) -> str:
    """`aten::add_` → `add_`; `aten::linear` → `linear`; other namespaces keep their last part."""
    return name.split("::")[-1].split(".")[0]


def has_work(descendants: Iterable[str]) -> bool:
    """Whether any nested op did real work (a copy, a kernel), not just views and allocations."""
    return any(aten_packet(d) not in _WORKLESS for d in descendants)


def classify_cpu_op(name: str, descendants: Iterable[str] = ()) -> tuple[C, str, str, str]:
    """A top-level CPU op (aten or custom) and the names nested in it → (class, op, label, plumbing)."""
    if "::" in name and not name.startswith("aten::"):
        return classify_kernel(name.split("::", 1)[1])
    packet = aten_packet(name)
    label = name
    desc = list(descendants)
    if packet in _ATTENTION_OPS:
        return C.ATTENTION, "attention", label, ""
    if packet in _FILL:
        return C.PLUMBING, "fill", label, "fill"
    if packet in ("arange",):
        return C.PLUMBING, "alloc", label, "alloc"
    if packet in _NOOP_UNLESS_WORK:
        if has_work(desc):
            op = "cast" if packet in ("to", "type_as") else "copy"
            return C.ELEMENTWISE, op, label, ""
        return C.PLUMBING, "no-op", label, "no-op"
    if packet in _HOST:
        return C.PLUMBING, "host", label, "host"
    op_kind = ATEN_OPS.get(packet) or ATEN_OPS.get(packet.rstrip("_"))
    if op_kind is None:
        return C.OTHER, packet, label, ""
    if op_kind in VIEW_LIKE:
        if has_work(desc):
            return C.ELEMENTWISE, "copy", label, ""
        return C.PLUMBING, "view", label, "view"
    group = op_kind.group
    if group is OpGroup.MATMUL:
        return C.GEMM, op_kind.value, label, ""
    if group is OpGroup.NORM:
        return C.NORM, op_kind.value, label, ""
    if group is OpGroup.EMBEDDING:
        return C.EMBEDDING, "embedding", label, ""
    if group is OpGroup.CONV:
        return C.CONV1D, "conv1d", label, ""
    if group is OpGroup.CREATION:
        return C.PLUMBING, "alloc", label, "alloc"
    if op_kind is Op.MOE_EXPERTS:
        return C.MOE, "moe_experts", label, ""
    if op_kind is Op.LINEAR_ATTENTION:
        return C.LINEAR_ATTENTION, op_kind.value, label, ""
    return C.ELEMENTWISE, op_kind.value, label, ""
