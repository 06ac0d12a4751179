"""Rich rendering of `graphsim kv`: KV layout per rank, vLLM paging, memory budget, capacity."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from graphsim.serving.deployment import Deployment
from graphsim.serving.engine_config import EngineConfig
from graphsim.serving.kv_layout import KvLayout

GiB = 1 << 30
ORIGIN_STYLE = {"derived": "green", "estimated": "yellow", "assumed": "magenta", "given": "cyan"}


def fmt_bytes(n: float) -> str:
    a = abs(n)
    if a >= GiB:
        return f"{n / GiB:,.2f} GiB"
    if a >= 1 << 20:
        return f"{n / (1 << 20):,.2f} MiB"
    if a >= 1 << 10:
        return f"{n / (1 << 10):,.2f} KiB"
    return f"{n:,.0f} B"


def _origin(o: str) -> str:
    return f"[{ORIGIN_STYLE.get(o, '')}]{o}[/]"


def max_model_len_note(e: EngineConfig) -> list[str]:
    """The line saying max_model_len is the engine's fallback (the config states no context length), or none."""
    return ([f"[yellow]max_model_len {e.max_model_len:,}: {e.max_model_len_source}[/]; give --max-model-len for "
             "another"] if e.max_model_len_fallback else [])


def layout_table(dep: Deployment) -> Table:
    return layout_parts_table(dep.layout, dep.tp)


def layout_parts_table(lay: KvLayout, tp: int, source: str | None = None) -> Table:
    """The layout's parts per rank (per token, or per request for state), with its `source` in the title if given."""
    where = f"; source: {source}" if source else ""
    t = Table(title=f"KV cache per rank (tp={tp}, kv {lay.kv_dtype.label}{where})", title_justify="left")
    for col in ("part", "layers", "per token per layer", "per token", "what each layer keeps"):
        t.add_column(col, justify="right" if col in ("layers", "per token per layer", "per token") else "left")
    for p in lay.parts():
        if p.layer.state_bytes:
            per_layer, total = f"{fmt_bytes(p.layer.state_bytes)} / request", f"{fmt_bytes(p.state_bytes)} / request"
        else:
            per_layer, total = f"{p.layer.bytes_per_token:,} B", f"{p.bytes_per_token:,} B"
        kept = " (keeps the current chunk)" if p.layer.kind.value == "chunked" else " (keeps the window)"
        label = p.layer.label + (kept if p.layer.window else "")
        t.add_row(label, str(p.layers), per_layer, total, p.layer.detail)
    cap = f"per token per rank: [bold]{lay.bytes_per_token:,} B[/] ({fmt_bytes(lay.bytes_per_token)}) over all attention layers"
    if lay.state_bytes_per_request:
        cap += f"; state per request per rank: [bold]{fmt_bytes(lay.state_bytes_per_request)}[/]"
    t.caption = cap
    t.caption_justify = "left"
    return t


def groups_table(dep: Deployment) -> Table:
    lay, cap = dep.layout, dep.capacity
    t = Table(title="vLLM paging: KV-cache groups share one pool of blocks", title_justify="left")
    for col in ("group", "layers", "block size", "page per layer", f"blocks for one {cap.max_model_len:,}-token request"):
        t.add_column(col, justify="left" if col == "group" else "right")
    for i, g in enumerate(lay.groups):
        label = g.kind.value + ((f" (chunk {g.window})" if g.kind.value == "chunked" else f" (window {g.window})")
                                if g.window else "")
        layers = str(g.layers) + (f" ({g.layers - g.real_layers} padding)" if g.real_layers != g.layers else "")
        t.add_row(f"{i}: {label}", layers, "–" if g.kind.value == "state" else f"{g.block_size}",
                  f"{g.page_bytes:,} B", f"{g.admission_blocks(cap.max_model_len, cap.in_flight_tokens):,}")
    t.caption = (f"a block id holds one page of every layer of a group: {lay.bytes_per_block:,} B "
                 f"({fmt_bytes(lay.bytes_per_block)}); sliding windows reserve window − 1 + "
                 f"{cap.in_flight_tokens:,} in-flight tokens (2 × max_num_batched_tokens)"
                 + ("; chunked layers reserve one chunk + the in-flight tokens"
                    if any(g.kind.value == "chunked" for g in lay.groups) else ""))
    t.caption_justify = "left"
    return t


def _total_source(dep: Deployment, total: int) -> str:
    hw = dep.hardware
    if hw.cuda_memory_bytes and total == hw.cuda_memory_bytes:
        return f"the total CUDA reports, hardware spec cuda_memory_bytes; {hw.memory_bytes / 2**30:,.2f} GiB on the datasheet"
    return "hardware spec"


def budget_table(dep: Deployment) -> Table:
    b = dep.budget
    t = Table(title="memory budget per rank (vLLM determine_available_memory)", title_justify="left")
    for col in ("term", "bytes", "origin", "how"):
        t.add_column(col, justify="right" if col == "bytes" else "left")
    t.add_row(f"{dep.hardware.name} × gpu_memory_utilization {b.utilization:g}", fmt_bytes(b.requested_bytes),
              _origin("derived"), f"ceil({b.total_bytes:,} B × {b.utilization:g}) ({_total_source(dep, b.total_bytes)})")
    for term in b.terms:
        t.add_row(f"− {term.name}", fmt_bytes(term.bytes), _origin(term.origin), term.how)
    if b.given_available is not None:
        t.add_row("[bold]available for KV (given)[/]", f"[bold]{fmt_bytes(b.available_bytes)}[/]", _origin("given"),
                  "--kv-memory replaces the computation above, as vLLM logs it: 'Available KV cache memory'")
    else:
        style = "bold red" if b.available_bytes <= 0 else "bold"
        t.add_row(f"[{style}]= available for KV[/]", f"[{style}]{fmt_bytes(b.available_bytes)}[/]",
                  _origin(b.source), "requested − the terms above")
    return t


def capacity_lines(dep: Deployment) -> list[str]:
    cap, lay, e = dep.capacity, dep.layout, dep.engine
    lines = []
    if cap.available_bytes <= 0:
        lines.append(f"[bold red]no memory is left for the KV cache[/] ({fmt_bytes(cap.available_bytes)}): the weights "
                     f"and buffers do not fit {dep.hardware.name} at tp={dep.tp}; raise --tp or --gpu-memory-utilization")
    lines.append(f"capacity: [bold]{cap.num_blocks:,} blocks[/] of {fmt_bytes(cap.bytes_per_block)} "
                 f"= {max(cap.available_bytes, 0) // max(cap.bytes_per_block, 1):,} × {cap.bytes_per_block:,} B; one request of "
                 f"max_model_len {cap.max_model_len:,} needs {cap.blocks_per_request:,} blocks")
    lines += max_model_len_note(e)
    if lay.single_block_size:
        lines.append(f"tokens in the cache: {cap.num_blocks:,} × {lay.block_size} = {cap.num_blocks * lay.block_size:,}")
    lines.append(f"as {cap.profile.name} ({cap.profile.family}) logs it: "
                 + "; ".join(f"[bold]{line}[/]" for line in cap.vllm_log_verbatim()))
    if not cap.fits_one_request and cap.num_blocks > 0:
        lines.append("[bold red]one request of max_model_len does not fit[/]: vLLM refuses to start; lower "
                     "--max-model-len or raise --gpu-memory-utilization")
    if e.profile.is_vllm:
        lines.append(f"[dim]engine: max_num_batched_tokens {e.max_num_batched_tokens:,}, max_num_seqs {e.max_num_seqs}, "
                     f"block size {lay.block_size} (vllm serve defaults on {dep.hardware.id} unless given)[/]")
    elif e.profile.engine == "sglang":
        lines.append(f"[dim]engine: chunked_prefill_size {e.max_num_batched_tokens:,}, max_running_requests "
                     f"{e.max_num_seqs}, page_size {lay.block_size}, mem_fraction_static {dep.budget.utilization} "
                     f"(sglang.launch_server defaults on {dep.hardware.id} unless given; docs/engines.md)[/]")
    else:
        lines.append(f"[dim]engine: max_num_tokens {e.max_num_batched_tokens:,}, "
                     f"max_batch_size {e.max_num_seqs}, tokens_per_block {lay.block_size}, free_gpu_memory_fraction "
                     f"{dep.budget.utilization} (trtllm-serve defaults on {dep.hardware.id} unless given; "
                     "docs/engines.md)[/]")
    for note in lay.notes:
        lines.append(f"[dim]note: {note}[/]")
    if dep.budget.given_available is None:
        lines.append("[dim]estimated/assumed terms are not measured; pass --kv-memory with the 'Available KV cache "
                     "memory' vLLM logged to reproduce its capacity exactly[/]" if e.profile.is_vllm else
                     "[dim]estimated/assumed terms are not measured; pass --kv-memory with the KV memory the engine "
                     "logged to reproduce its capacity exactly[/]")
    return lines


def render_kv(dep: Deployment) -> Group:
    p = dep.precision
    par = dep.config.parallel  # a MoE model's -dp: every table below is one DP rank's (serving/dp_attention.py)
    dp = (f" dp={par.data_parallel_size} ({'EP' if par.enable_expert_parallel else 'TP-sharded'} experts over "
          f"{par.data_parallel_size * dep.tp} GPUs; one DP rank shown)" if dep.dp_coupled else "")
    head = (f"[bold]{dep.model.name}[/] ({dep.model.architecture}) on [bold]{dep.hardware.id}[/] tp={dep.tp}{dp}: "
            f"weights {p['weight']} (quantization: {p['quantization']}), KV {p['kv']} ({p['kv_source']}), "
            f"state {p['state']}")
    return Group(head, layout_table(dep), groups_table(dep), budget_table(dep), *capacity_lines(dep))
