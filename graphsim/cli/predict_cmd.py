"""`graphsim predict`: price explicit batch shapes (no scheduler) on a GPU."""

from __future__ import annotations

import dataclasses
import json

import typer

from graphsim.cli import afd_cli, cp_cli
from graphsim.cli import options as opt
from graphsim.cli import spec_cli
from graphsim.cli.app import app, console
from graphsim.cli.sources import load_source
from graphsim.versions import versions


@app.command("predict")
def predict_cmd(
    model: opt.GraphModel,
    revision: opt.Revision = None,
    trust_remote_code: opt.TrustRemoteCode = False,
    gpu: opt.Gpu = opt.DEFAULT_GPU,
    tp: opt.Tp = 1,
    ep: opt.Ep = 1,
    pipeline_parallel_size: opt.PipelineParallel = 1,
    pp_layer_partition: opt.PpLayerPartition = None,
    data_parallel_size: opt.DataParallel = 1,
    prefill_context_parallel_size: cp_cli.PrefillContextParallel = 1,
    decode_context_parallel_size: cp_cli.DecodeContextParallel = 1,
    enable_expert_parallel: opt.EnableExpertParallel = False,
    all2all_backend: opt.All2AllBackendOpt = None,
    batch: opt.Batches = None,
    profile: opt.Profile = None,
    target: opt.Target = "vllm",
    engine: opt.Engine = opt.DEFAULT_ENGINE,
    kv_dtype: opt.KvDtype = None,
    dtype: opt.Dtype = None,
    moe_routing: opt.MoeRoutingSpec = None,
    interconnect: opt.Interconnect = None,
    link_bandwidth: opt.LinkBandwidth = None,
    gpus_per_node: opt.GpusPerNode = None,
    network_bandwidth: opt.NetworkBandwidth = None,
    network_latency_us: opt.NetworkLatency = None,
    enforce_eager: opt.EnforceEager = False,
    disable_custom_all_reduce: opt.DisableCustomAllReduce = False,
    afd: afd_cli.Afd = None,
    afd_micro_batches: afd_cli.AfdMicroBatches = 2,
    afd_ffn_parallel: afd_cli.AfdFfnParallel = "tp",
    afd_link_gbps: afd_cli.AfdLinkGbps = None,
    afd_link_latency_us: afd_cli.AfdLinkLatencyUs = None,
    afd_attention_tp: afd_cli.AfdAttentionTp = 0,
    speculative_config: spec_cli.SpeculativeConfigOpt = None,
    spec_acceptance: spec_cli.SpecAcceptanceOpt = None,
    tree: bool = typer.Option(True, "--tree/--no-tree", help="Show the cost tree."),
    limit: opt.Limit = 25,
    as_json: opt.Json = False,
) -> None:
    """Predict iteration times for explicit batches; every number says where it came from."""
    from graphsim.cost_model import build_cost_model
    from graphsim.costing.collectives import MAX_CUDAGRAPH_CAPTURE_SIZE, CollectiveSettings
    from graphsim.costing.moe_routing import parse_routing
    from graphsim.costing.predict import predict
    from graphsim.workload import parse_batch_spec

    specs = batch or ["prefill:1x2048", "decode:64x2048"]
    from graphsim.cli.pp_cli import check_alone

    check_alone(pipeline_parallel_size, pp_layer_partition, data_parallel_size=data_parallel_size, afd=afd,
                speculative_config=speculative_config, context_parallel=max(prefill_context_parallel_size,
                                                                           decode_context_parallel_size))
    spec_opts = spec_cli.options(model, speculative_config, spec_acceptance, revision)  # checked before a trace
    from graphsim.cli.dp_predict import expert_parallel_size

    ep = expert_parallel_size(tp, ep, data_parallel_size, enable_expert_parallel, all2all_backend)
    steps = [parse_batch_spec(s) for s in specs] if data_parallel_size == 1 else []
    hw = opt.hardware_on(gpu, opt.interconnect_data(interconnect, link_bandwidth, gpus_per_node, network_bandwidth,
                                                    network_latency_us))
    cp = cp_cli.context_parallel(prefill_context_parallel_size, decode_context_parallel_size)
    if cp is not None:
        cp.check(tp)  # before a trace
    afd_config = afd_cli.afd_config(afd, afd_micro_batches, afd_ffn_parallel, afd_link_gbps, afd_link_latency_us,
                                    afd_attention_tp)
    if afd_config is not None:  # attention–FFN disaggregation: two pools (graphsim/serving/afd.py)
        afd_cli.check_parallel(afd_config, tp, ep)
        afd_cli.predict_afd(afd_config, lambda: load_source(model, dtype), hw, specs, dtype=dtype, kv_dtype=kv_dtype,
                            profile=profile, target=target, moe_routing=parse_routing(moe_routing),
                            collectives=CollectiveSettings(not disable_custom_all_reduce,
                                                           0 if enforce_eager else MAX_CUDAGRAPH_CAPTURE_SIZE),
                            link_gbps=afd_link_gbps, link_latency_us=afd_link_latency_us, as_json=as_json, tree=tree,
                            versions=versions(profile, gpu))
        return
    from graphsim.serving.engine_versions import parse_engine

    # --engine sglang|trtllm (or --target sglang|trtllm): that engine's kernels, priced from its own tables
    eng = parse_engine(engine).engine
    if eng == "vllm" and target in ("sglang", "trtllm"):
        eng = target
    default_profile = True
    if eng != "vllm":
        target = eng if target == "vllm" else target
        if profile is None:
            from graphsim.serving.engines import engine_profile

            profile, default_profile = engine_profile(hw.id, eng), False
    cm = build_cost_model(lambda: load_source(model, dtype), hw, tp=tp, ep=ep, dtype=dtype, kv_dtype=kv_dtype,
                          profile=profile, default_profile=default_profile, target=target,
                          moe_routing=parse_routing(moe_routing),
                          collectives=CollectiveSettings(not disable_custom_all_reduce,
                                                         0 if enforce_eager else MAX_CUDAGRAPH_CAPTURE_SIZE),
                          # eager: vLLM's custom-op kernels (passes/fuse/vllm_inductor.py); V0 compiled nothing
                          compiled=not enforce_eager and parse_engine(engine).compiled,
                          combo=parse_engine(engine).combo_kernels)
    if cp is not None:  # decode context parallel reshapes the tree's attention (costing/context_parallel.py)
        from graphsim.costing.context_parallel import with_context_parallel

        cm = with_context_parallel(cm, cp)
    from graphsim.cli.pp_cli import pipeline_json, pipelined, print_pipeline

    cm = pipelined(cm, pipeline_parallel_size, pp_layer_partition)
    from graphsim.costing.kernel_map import quantization_summary
    from graphsim.ir.kernel import KernelAttrs

    if enable_expert_parallel and data_parallel_size == 1:
        from graphsim.costing.dp_attention import moe_leaf_indices

        if not moe_leaf_indices(cm.tree):  # vLLM refuses it too (ModelConfig._verify_with_expert_parallelism)
            raise typer.BadParameter(f"{cm.graph.name} has no routed experts, nothing to spread; drop it",
                                     param_hint="--enable-expert-parallel")
    if data_parallel_size > 1:
        from graphsim.cli.dp_predict import predict_data_parallel

        steps = predict_data_parallel(cm, specs, tp, data_parallel_size, enable_expert_parallel, all2all_backend,
                                      as_json, profile, gpu)
        if not steps:
            return
    pred = predict(cm, steps, specs)
    spec = spec_cli.predict_speculative(cm, spec_opts, specs, steps)
    kernels = [n.attrs for n in cm.graph.nodes if isinstance(n.attrs, KernelAttrs)]
    quant = quantization_summary(kernels, cm.graph.meta, cm.dtypes, kv_dtype)
    if as_json:
        extra = {"quantization": dataclasses.asdict(quant)} if quant else {}
        print(json.dumps({**pred.to_json(), **extra, **pipeline_json(cm, steps, specs),
                          **cp_cli.cp_json(cm, cp, steps, specs),
                          **(spec.to_json() if spec else {}), "versions": versions(profile, gpu)},
                         indent=1, default=str))
        return
    from graphsim.render.cost_view import render_prediction

    if quant:
        console.print(quant.line(), markup=False)
    console.print(render_prediction(pred, tree, limit))
    print_pipeline(console, cm, steps, specs)
    cp_cli.print_context_parallel(console, cm, cp, steps, specs)
    if spec is not None:
        spec_cli.print_speculative(console, spec, tree, limit)
