"""Rich rendering of `graphsim kv` for an architecture whose KV layout comes from the traced graph (graph_kv.py)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from graphsim.render.kv_view import fmt_bytes, layout_parts_table, max_model_len_note
from graphsim.serving.graph_kv import GraphKv


def render_graph_kv(g: GraphKv) -> Group:
    lay = g.layout
    head = (f"[bold]{g.model.name}[/] ({g.model.architecture}) on [bold]{g.hardware_id}[/] tp={lay.tp}: "
            f"KV {lay.kv_dtype.label}, state {lay.state_dtype.label}; [yellow]KV layout from the {lay.source}[/] "
            f"({g.reason})")
    t = layout_parts_table(lay, lay.tp, lay.source)
    groups = Table(title="vLLM paging: KV-cache groups share one pool of blocks", title_justify="left")
    for col in ("group", "layers", "block size", "page per layer"):
        groups.add_column(col, justify="left" if col == "group" else "right")
    for i, gr in enumerate(lay.groups):
        groups.add_row(f"{i}: {gr.kind.value}" + (f" (window {gr.window})" if gr.window else ""), str(gr.layers),
                       "–" if gr.kind.value == "state" else str(gr.block_size), f"{gr.page_bytes:,} B")
    lines: list[str] = []
    cap = g.capacity
    if cap is None:
        lines.append("capacity: not computed: the memory budget's weight term comes from the work accountant, which "
                     "lacks this architecture; give --kv-memory (vLLM's logged 'Available KV cache memory') for it")
    else:
        lines.append(f"capacity of the given --kv-memory {fmt_bytes(cap.available_bytes)}: [bold]{cap.num_blocks:,} "
                     f"blocks[/] of {fmt_bytes(cap.bytes_per_block)}; one request of max_model_len "
                     f"{cap.max_model_len:,} needs {cap.blocks_per_request:,} blocks")
        lines.append(f"as {cap.profile.name} logs it: " + "; ".join(f"[bold]{x}[/]" for x in cap.vllm_log_verbatim()))
    lines += max_model_len_note(g.engine)
    lines += [f"[dim]note: {n}[/]" for n in lay.notes]
    return Group(head, t, groups, *lines)
