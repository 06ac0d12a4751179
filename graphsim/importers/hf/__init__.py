"""Hugging Face importer: `<hf-model>` → graphsim Graph, traced on the meta device.

    graph, report = import_hf("llama-3.1-8b")

The model is built at full depth on the meta device (no weights), its decoder layers are
classified by structure, one layer per distinct type is kept, and the result is exported with
torch.export (non-strict) with a dynamic token dimension T. The Graph records the full layer
schedule, the real depth and the full parameter count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphsim.catalog import ResolvedModel, resolve_model
from graphsim.errors import GraphsimError, UnsupportedArchitectureError
from graphsim.ir import Graph, LayerSchedule


@dataclass
class ImportReport:
    model: str
    architecture: str
    source: str
    num_layers: int
    traced_layers: list[int]
    param_count: int
    nodes: int
    opaque_ops: dict[str, int]
    dynamic_tokens: bool
    semantic_kernels: list[str]
    timings_s: dict[str, float] = field(default_factory=dict)
    cache: str = "off"  # the graph cache (graphsim/importers/graph_cache.py): "hit <file>", "stored <file>" or "off"
    remote_code: str = ""  # the snapshot directory whose own .py files built the model (remote_code.py), else ""

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def import_hf(model: str | ResolvedModel, *, dtype: str | None = None, full_depth: bool = False,
              cache: bool = True, trust_remote_code: bool | None = None) -> tuple[Graph, ImportReport]:
    """Import a causal LM. `full_depth=True` traces every layer (slow; for comparison only). `trust_remote_code`
    (None: $GRAPHSIM_TRUST_REMOTE_CODE, which --trust-remote-code sets): build a snapshot with auto_map from its own
    .py files (importers/hf/remote_code.py); the cache key then holds their sha256.

    With `cache` (and GRAPHSIM_NO_CACHE unset) a graph traced before from the same config, dtype, options and
    graphsim / torch / transformers versions is read back from $GRAPHSIM_HOME/cache/graphs without importing
    torch (graphsim/importers/graph_cache.py), and a new trace is stored there."""
    from graphsim.importers import graph_cache
    from graphsim.importers.hf import remote_code

    t0 = time.perf_counter()
    resolved = model if isinstance(model, ResolvedModel) else resolve_model(model)
    code_dir = remote_code.code_dir(resolved.location, resolved.source)
    remote = remote_code.applies(resolved.config, code_dir, trust_remote_code)
    fallback = remote_code.transformers_fallback(resolved.config, code_dir, trust_remote_code)
    if fallback is not None:
        graph_cache.notice(fallback)
    code = {"remote_code": remote_code.code_digest(code_dir)} if remote and code_dir is not None else {}
    fields = graph_cache.key_fields(resolved.config, resolved.name, dtype, full_depth=full_depth, **code)
    hit = graph_cache.load(fields) if cache else None
    if hit is not None:
        graph, report_json = hit
        graph.meta.config_source, graph.meta.config_location = resolved.source, resolved.location
        report = ImportReport(**{**report_json, "source": resolved.source,
                                 "remote_code": str(code_dir) if code else ""})  # (this snapshot, same code)
        report.timings_s = {"cache_load_s": time.perf_counter() - t0}
        report.cache = f"hit {graph_cache.entry_path(graph_cache.cache_key(fields))}"
        return graph, report
    graph, report = _trace_hf(resolved, dtype, full_depth, code_dir, trust_remote_code)
    if cache:
        stored = graph_cache.store(fields, graph, report.to_json())
        report.cache = f"stored {stored}" if stored is not None else "off"
    return graph, report


def _trace_failure(architecture: str, error: Exception, code_dir: Path | None = None) -> str:
    """One line naming where in the model's own code tracing on the meta device failed."""
    import traceback

    from graphsim.importers.hf.remote_code import where_in_code

    frames = traceback.extract_tb(error.__traceback__)
    model_frames = [f for f in frames if "transformers" in Path(f.filename).parts and "models" in Path(f.filename).parts]
    where = where_in_code(error, code_dir)  # a frame in the snapshot's own code (trusted remote code), else ''
    if model_frames and not where:
        f = model_frames[-1]
        where = f" in {'/'.join(Path(f.filename).parts[-2:])} line {f.lineno} ({f.line or ''})"
    detail = " ".join(f"{type(error).__name__}: {error}".split())[:200]
    if code_dir is not None:  # the model's own (remote) code: the accountant has no builder for it either
        return (f"graphsim cannot trace {architecture}'s own code on the meta device{where}: {detail}; the code must "
                "run without weights and without reading tensor values in Python (docs/import.md, remote code)")
    return (f"graphsim cannot trace {architecture} yet: its forward failed on the meta device{where}: {detail}; "
            "this mechanism needs a semantic op in graphsim (docs/adding-an-architecture.md); "
            "graphsim work / kv may still account it from the config")


def _trace_hf(resolved: ResolvedModel, dtype: str | None, full_depth: bool, code_dir: Path | None = None,
              trust_remote_code: bool | None = None) -> tuple[Graph, ImportReport]:
    from graphsim.importers.hf.alibi_ops import alibi_patches, register_attention_tables
    from graphsim.importers.hf.build import build_on_meta, text_model
    from graphsim.importers.hf.convert import ConvertContext, convert_graph
    from graphsim.importers.hf.custom_ops import semantic_kernels
    from graphsim.importers.hf.layers import keep_representatives, plan_layers, restore_depth, skips_layers_by_position
    from graphsim.importers.hf.trace import STATIC_PROBE_TOKENS, trace

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    register_attention_tables()
    built = build_on_meta(resolved.config, dtype, code_dir, trust_remote_code)
    timings["build_s"] = time.perf_counter() - t0

    m = built.model
    param_count = sum(p.numel() for p in m.parameters())
    root = text_model(m)  # a multimodal wrapper serves text through its language model: trace that
    plan = plan_layers(root)
    representative = dict(plan.representative)
    full_depth = full_depth or skips_layers_by_position(root, plan)  # (MLlama's text path: layers.py)
    kept = list(range(len(plan.tags))) if full_depth else keep_representatives(root, plan, built.config)

    t1 = time.perf_counter()
    with semantic_kernels(m) as swapped, alibi_patches(m) as alibi:
        swapped = swapped + alibi
        try:
            try:
                traced = trace(root)
            except (KeyboardInterrupt, GraphsimError):
                raise
            except Exception:
                # A forward that reads the depth outside the stack (Gemma-3n / Gemma-4's per-layer input embedding,
                # built num_hidden_layers x hidden_size_per_layer_input wide and reshaped by the config's depth)
                # fails on the cut config: trace the representatives again with the config's full depth (the
                # loop `self.layers[: num_hidden_layers]` still runs the kept ones).
                if full_depth or not restore_depth(root, built.config, len(plan.tags), len(kept)):
                    raise
                traced = trace(root)
        except (KeyboardInterrupt, GraphsimError):
            raise
        except Exception as e:  # the model's own forward failed under the trace: say where, in one line
            remote = Path(built.remote_code) if built.remote_code is not None else None
            raise UnsupportedArchitectureError(_trace_failure(built.architecture, e, remote)) from e
    timings["trace_s"] = time.perf_counter() - t1

    t2 = time.perf_counter()
    sig = traced.program.graph_signature
    canonical = _tied_parameter_names(m)
    placeholders: dict[str, tuple[str, str]] = {}
    for spec in sig.input_specs:
        kind = spec.kind.name.lower()
        target = spec.target or spec.arg.name
        target = "model." + canonical.get(target.removeprefix("model."), target.removeprefix("model."))
        placeholders[spec.arg.name] = (
            "param" if kind == "parameter" else "buffer" if kind in ("buffer", "constant_tensor") else "input",
            target if kind != "user_input" else "input_ids",
        )
    token_symbols = traced.token_symbols
    ctx = ConvertContext(token_symbols=token_symbols, layer_map=dict(enumerate(kept)), stack_path=plan.stack_path,
                        root_prefix="model.")
    graph = convert_graph(traced.program.graph, resolved.name, placeholders, ctx)
    if not traced.dynamic:
        _symbolise_static(graph, STATIC_PROBE_TOKENS[0])
    _ssm_state_dtypes(graph, built.architecture, built.config, built.dtype)
    if full_depth:  # every layer traced: the fold pass derives the schedule; keep the tags as a hint
        graph.meta.full_depth = True
        graph.meta.layer_tags = list(plan.tags)
    else:
        graph.schedule = LayerSchedule(plan.tags, representative)
    m = graph.meta
    m.source_format, m.model, m.architecture = "hf", resolved.name, built.architecture
    m.config_source, m.config_location = resolved.source, resolved.location
    m.dtype = str(built.dtype).removeprefix("torch.")
    m.num_layers, m.layer_stack, m.traced_layers = len(plan.tags), plan.stack_path, kept
    m.param_count, m.params_per_layer = int(param_count), list(plan.params_per_layer)
    m.quantization_config, m.opaque_ops = built.quantization, sorted(set(ctx.opaque))
    m.tied_params, m.dynamic_tokens = canonical, traced.dynamic
    timings["convert_s"] = time.perf_counter() - t2
    graph.verify("import.hf")
    if built.remote_code is not None:
        from graphsim.importers.hf.remote_code import check_attention

        check_attention(graph, built.architecture)
    opaque: dict[str, int] = {}
    for t in ctx.opaque:
        opaque[t] = opaque.get(t, 0) + 1
    report = ImportReport(
        model=resolved.name, architecture=built.architecture, source=resolved.source,
        num_layers=len(plan.tags), traced_layers=kept, param_count=int(param_count), nodes=len(graph.nodes),
        opaque_ops=opaque, dynamic_tokens=traced.dynamic, semantic_kernels=swapped, timings_s=timings,
        remote_code=built.remote_code or "",
    )
    return graph, report


# Architectures whose vLLM config hook sets the Mamba2 temporal-state dtype from the HF config, float32 when the
# config states none (vllm/model_executor/models/config.py NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype,
# DEFAULT_MAMBA_SSM_CACHE_DTYPE = "float32", registered for these classes in MODELS_CONFIG_MAP). Every other
# Mamba2 model keeps vLLM's default mamba_ssm_cache_dtype "auto": the model dtype (mamba_utils.py
# MambaStateDtypeCalculator).
SSM_STATE_DTYPE_HOOK = {"NemotronHForCausalLM": "float32", "NemotronHPuzzleForCausalLM": "float32"}


def _ssm_state_dtypes(graph: Graph, architecture: str, config, model_dtype) -> None:
    """Record on each Mamba2 / Mamba-1 scan node the dtype vLLM keeps its temporal state in."""
    from dataclasses import replace

    from graphsim.importers.hf.convert import to_dtype
    from graphsim.ir import LinearAttentionAttrs, Op
    from graphsim.ir.tensor import DTYPE_ALIASES, DType

    default = SSM_STATE_DTYPE_HOOK.get(architecture)
    name = (getattr(config, "mamba_ssm_cache_dtype", None) or default) if default else None
    dtype = to_dtype(model_dtype)
    if isinstance(name, str):
        dtype = DTYPE_ALIASES.get(name.removeprefix("torch."), dtype)
    for i, n in enumerate(graph.nodes):
        # (Mamba-1 too: vLLM mamba_utils.py MambaStateDtypeCalculator.mamba1_state_dtype, the same rule)
        if n.op is Op.LINEAR_ATTENTION and isinstance(n.attrs, LinearAttentionAttrs) and n.attrs.kind in (
                "mamba2_ssd", "mamba1"):
            graph.nodes[i] = n.with_(attrs=replace(n.attrs, state_dtype=DType(dtype).value))


def _tied_parameter_names(model) -> dict[str, str]:
    """alias name → canonical name for parameters shared between modules (tied embeddings)."""
    first: dict[int, str] = {}
    out: dict[str, str] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        if id(p) in first:
            out[name] = first[id(p)]
        else:
            first[id(p)] = name
    return out


def _symbolise_static(graph: Graph, probe: int) -> None:
    """A static trace at `probe` tokens: read dims equal to `probe` as T."""
    from graphsim.ir import T, TensorSpec

    def fix(s: TensorSpec) -> TensorSpec:
        return TensorSpec(tuple(T if d == probe else d for d in s.shape), s.dtype)

    graph.inputs = {k: fix(s) for k, s in graph.inputs.items()}
    graph.nodes = [n.with_(outputs=tuple(fix(s) for s in n.outputs)) for n in graph.nodes]
