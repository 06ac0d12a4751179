"""The attention–FFN disaggregation options (`--afd ATTN_GPUS:FFN_GPUS`, `--afd-micro-batches`, …) and what
`predict` and `simulate` do with them (graphsim/serving/afd.py). vLLM has no AFD option, so these names are
graphsim's own (docs/deployment-modes.md)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from graphsim.serving.afd import AfdConfig, AfdError

Afd = Annotated[str | None, typer.Option(
    "--afd", metavar="ATTN_GPUS:FFN_GPUS",
    help="Attention–FFN disaggregation: attention (and the KV cache) on ATTN_GPUS GPUs as one TP instance, every "
         "layer's FFN/MoE on FFN_GPUS GPUs, hidden states sent between them per layer, ping-pong micro-batches "
         "(graphsim's name: vLLM has no AFD option).")]
AfdMicroBatches = Annotated[int, typer.Option(
    "--afd-micro-batches", help="With --afd: micro-batches in the ping-pong pipeline (1: no overlap).")]
AfdFfnParallel = Annotated[str, typer.Option(
    "--afd-ffn-parallel", help="With --afd: how the FFN pool splits the FFN, tp (every expert sharded) or ep "
                               "(whole experts spread over its GPUs, as vLLM's --enable-expert-parallel).")]
AfdAttentionTp = Annotated[int, typer.Option(
    "--afd-attention-tp", help="With --afd: TP of one attention instance; ATTN_GPUS / it instances, each with its own "
                               "batch and KV cache, feed the FFN pool together (default: one instance of all "
                               "ATTN_GPUS).")]
AfdLinkGbps = Annotated[float | None, typer.Option(
    "--afd-link-gbps", help="With --afd: bandwidth GB/s per GPU of the link between the pools (default: the "
                            "spec's NVLink inside one node, its network between nodes).")]
AfdLinkLatencyUs = Annotated[float | None, typer.Option(
    "--afd-link-latency-us", help="With --afd: latency µs of one transfer between the pools (default: the spec's).")]


def afd_config(afd: str | None, micro_batches: int, ffn_parallel: str, link_gbps: float | None = None,
               link_latency_us: float | None = None, attention_tp: int = 0) -> AfdConfig | None:
    """The AFD options checked (one-line AfdError naming the bad value); None without --afd."""
    if afd is None:
        given = [n for n, on in (("--afd-micro-batches", micro_batches != 2), ("--afd-ffn-parallel", ffn_parallel != "tp"),
                                 ("--afd-link-gbps", link_gbps is not None),
                                 ("--afd-link-latency-us", link_latency_us is not None),
                                 ("--afd-attention-tp", attention_tp != 0)) if on]
        if given:
            raise AfdError(f"{', '.join(given)} belong to attention–FFN disaggregation; add --afd ATTN_GPUS:FFN_GPUS")
        return None
    if ffn_parallel not in ("tp", "ep"):
        raise AfdError(f"--afd-ffn-parallel {ffn_parallel!r}: give tp or ep")
    if link_gbps is not None and not link_gbps > 0:
        raise AfdError(f"--afd-link-gbps {link_gbps:g}: give a bandwidth > 0")
    if link_latency_us is not None and not link_latency_us >= 0:
        raise AfdError(f"--afd-link-latency-us {link_latency_us:g}: give a latency >= 0")
    if attention_tp < 0:
        raise AfdError(f"--afd-attention-tp {attention_tp}: give a positive divisor of ATTN_GPUS")
    return AfdConfig.parse(afd, micro_batches, ffn_parallel == "ep", attention_tp)


def check_parallel(config: AfdConfig, tp: int, ep: int = 1) -> None:
    """--tp / --ep beside --afd: the pools' own sizes come from --afd."""
    if tp not in (1, config.tp):
        raise AfdError(f"--tp {tp} with --afd {config.attention_gpus}:{config.ffn_gpus}: an attention instance is "
                       f"tp{config.tp}; drop --tp (--afd-attention-tp sets it)")
    if ep != 1:
        raise AfdError(f"--ep {ep} with --afd: the FFN pool's split is --afd-ffn-parallel tp|ep over its "
                       f"{config.ffn_gpus} GPUs; drop --ep")


def predict_afd(config: AfdConfig, model_loader: Any, hw: Any, specs: list[str], *, dtype: str | None,
                kv_dtype: str | None, profile: str | None, target: str, moe_routing: Any, collectives: Any,
                link_gbps: float | None, link_latency_us: float | None, as_json: bool, tree: bool,
                versions: dict[str, Any]) -> None:
    """`graphsim predict --afd`: each batch as an AFD iteration, its per-pool cost tree and the composition."""
    from graphsim.cli.app import console
    from graphsim.serving.afd import build_afd_model
    from graphsim.workload import parse_batch_spec

    steps = [parse_batch_spec(s) for s in specs]
    model = build_afd_model(model_loader, hw, config, dtype=dtype, kv_dtype=kv_dtype, profile=profile, target=target,
                            moe_routing=moe_routing, collectives=collectives, link_gbps=link_gbps,
                            link_latency_us=link_latency_us)
    t = model.times(steps)
    if as_json:
        print(json.dumps({**model.to_json(t, specs), "versions": versions}, indent=1, default=str))
        return
    from rich.table import Table

    console.print(f"{config.label()}; link {model.link.describe} [{model.link.source}]; "
                  f"{model.row_bytes:,.0f} B per token per layer each way", markup=False, highlight=False)
    console.print(f"attention pool: {model.attention.data_note}", markup=False, highlight=False)
    if model.ffn.data_note != model.attention.data_note:
        console.print(f"FFN pool: {model.ffn.data_note}", markup=False, highlight=False)
    table = Table(title="AFD iterations (µs; stage times per layer and micro-batch, the slowest layer kind's)")
    for col in ("batch", "micro-batch", "attention", "dispatch", "FFN", "combine", "iteration", "source"):
        table.add_column(col, justify="left" if col in ("batch", "micro-batch", "source") else "right")
    for b, label in enumerate(specs):
        table.add_row(label, t.micro[b].label(), *(f"{x[:, b].max():,.1f}" for x in (
            t.attention_us, t.dispatch_us, t.ffn_us, t.combine_us)), f"{t.total_us[b]:,.1f}",
            t.source_name(b))
    console.print(table)
    if tree:
        for b, label in enumerate(specs):
            console.print(f"\n{label}", markup=False)
            console.print("\n".join(model.tree_lines(t, b)), markup=False, highlight=False)


def afd_cost(dep: Any, config: AfdConfig, profile: str | None, moe_routing: Any, link_gbps: float | None,
             link_latency_us: float | None) -> tuple[Any, str, int]:
    """`deployment.build_cost` for an AFD deployment (`afd.afd_deployment`): both pools traced from the
    deployment's model and priced with its engine's CUDA-graph bound; (cost, what the numbers rest on, kernels)."""
    from dataclasses import replace

    from graphsim.costing.collectives import CollectiveSettings
    from graphsim.serving.afd import AfdCost, build_afd_model

    e = dep.engine
    model = dep.model
    if dep.config.ignore_quant:
        from graphsim.quantization import without_quantization

        model = replace(model, config=without_quantization(model.config))
    afd = build_afd_model(model, dep.hardware, config, dtype=dep.dtype, kv_dtype=dep.kv_dtype, profile=profile,
                          moe_routing=moe_routing,
                          collectives=CollectiveSettings.for_engine(e.max_num_seqs, e.max_num_batched_tokens),
                          link_gbps=link_gbps, link_latency_us=link_latency_us)
    note = (f"{config.label()}, link {afd.link.describe} [{afd.link.source}]; attention pool: "
            f"{afd.attention.data_note}")
    if afd.ffn.moe_routing:
        note += f"; MoE routing: {afd.ffn.moe_routing}"
    return AfdCost(afd), note, len(afd.split.attention_leaves()) + len(afd.split.ffn_leaves())
