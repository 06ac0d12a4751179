"""Options several commands share, declared once: one name, one meaning, one check everywhere.

A command imports this module as `opt` and takes an option as `tp: opt.Tp = 1` (typer reads the declaration
from the annotation, the default from the `=`); shared defaults are the constants here
(`gpu: opt.Gpu = opt.DEFAULT_GPU`). Where vLLM names the same
concept, vLLM's name is an alias with the same meaning (`--tensor-parallel-size` and `-tp` for `--tp`,
`--kv-cache-dtype` for `--kv-dtype`, `--enable-prefix-caching` for `--prefix-caching`), and vLLM's
spellings of values are accepted (`--kv-cache-dtype auto`, `--dtype half`). A bad value is a usage
error: one line naming the option, exit 2, before any work starts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

DEFAULT_GPU = "h200"
GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default

# --kv-dtype / --kv-cache-dtype: vLLM's values (CacheDType) that graphsim models, and graphsim's own
# spellings → the name graphsim's dtype parsers take; None: the model dtype (vLLM's `auto`).
KV_CACHE_DTYPES: dict[str, str | None] = {
    "auto": None,
    "bfloat16": "bf16", "bf16": "bf16",
    "float16": "fp16", "fp16": "fp16", "half": "fp16",
    "float32": "fp32", "fp32": "fp32",
    "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2",
    "int8": "int8",
}


def _kv_cache_dtype(value: str | None) -> str | None:
    if value is None:
        return None
    key = value.strip().lower()
    if key not in KV_CACHE_DTYPES:
        raise typer.BadParameter(f"'{value}' is not a KV-cache dtype graphsim models; use auto (the model dtype), "
                                 "bfloat16, float16, fp8 (= fp8_e4m3), fp8_e5m2 or int8")
    return KV_CACHE_DTYPES[key]


def _model_dtype(value: str | None) -> str | None:
    if value is None or value.strip().lower() == "auto":
        return None
    from graphsim.errors import GraphsimError
    from graphsim.work.dtypes import parse_dtype

    try:
        return parse_dtype(value, "--dtype").label  # one spelling for every reader: half → fp16, float → fp32
    except GraphsimError as e:
        raise typer.BadParameter(f"{e}, or auto (the config's)") from None


def _fuse_target(value: str | None) -> str | None:
    from graphsim.passes.fuse.fuse_pass import TARGETS

    if value is not None and value not in TARGETS:
        raise typer.BadParameter(f"unknown fuse target '{value}'; use {' or '.join(TARGETS)}")
    return value


def _fraction(value: float) -> float:
    if not 0 < value <= 1:
        raise typer.BadParameter(f"{value:g} is not a fraction in (0, 1]; vLLM's default is {GPU_MEMORY_UTILIZATION}")
    return value


# The model a command reads.
ConfigModel = Annotated[str, typer.Argument(help="Catalog name, HF id, config.json or model directory.")]
GraphModel = Annotated[str, typer.Argument(
    help="Catalog name, HF id, config.json, model directory, ONNX file, or a saved (fused) graph (.json).")]

def _revision(value: str | None) -> str | None:
    """--revision reaches every resolver of the model (worker processes too) through the environment."""
    import os

    from graphsim.catalog import REVISION_ENV

    if value:
        os.environ[REVISION_ENV] = value
    else:
        os.environ.pop(REVISION_ENV, None)
    return value


Revision = Annotated[str | None, typer.Option(
    "--revision", callback=_revision, metavar="REV",
    help="Branch, tag or commit of an HF id in the local Hugging Face cache (default: the snapshot refs/main "
         "names), as vLLM's --revision; never downloads.")]


def _trust_remote_code(value: bool) -> bool:
    """--trust-remote-code reaches every importer (worker processes too) through the environment."""
    import os

    from graphsim.catalog import TRUST_REMOTE_CODE_ENV  # (not the importer: every command runs this callback)

    if value:
        os.environ[TRUST_REMOTE_CODE_ENV] = "1"
    else:
        os.environ.pop(TRUST_REMOTE_CODE_ENV, None)
    return value


TrustRemoteCode = Annotated[bool, typer.Option(
    "--trust-remote-code", callback=_trust_remote_code,
    help="Build a model directory whose config.json has auto_map from its own configuration_*.py / modeling_*.py "
         "(as vLLM's and transformers' --trust-remote-code): runs that code, offline, on the meta device.")]

# The deployment.
GPU_HELP = ("GPU: a hardware spec id or alias (h100, h200, b200, a100, l40s; `graphsim profiles hardware` lists "
            "them) or a JSON spec file.")
Gpu = Annotated[str, typer.Option("--gpu", help=GPU_HELP)]
GpuOfProfile = Annotated[str | None, typer.Option("--gpu", help=f"{GPU_HELP} Default: the profile's own.")]
Tp = Annotated[int, typer.Option(
    "--tp", "--tensor-parallel-size", "-tp", min=1, help="Tensor-parallel size.")]
Ep = Annotated[int, typer.Option("--ep", min=1, help="Expert-parallel size of the MoE layers (1: every rank "
                                                      "holds every expert).")]
# vLLM's pipeline parallel (costing/pipeline.py, docs/deployment-modes.md)
PipelineParallel = Annotated[int, typer.Option(
    "--pipeline-parallel-size", "-pp", min=1, max=1024,
    help="vLLM's --pipeline-parallel-size: the layers split into this many stages of tp GPUs each (vLLM's "
         "get_pp_indices), hidden states sent between them; GPUs: tp × pp.")]
PpLayerPartition = Annotated[str | None, typer.Option(
    "--pp-layer-partition", metavar="N,N,…",
    help="Layers per pipeline stage, as vLLM's VLLM_PP_LAYER_PARTITION (e.g. 4,6,6,4); default: that variable "
         "when set, else vLLM's even split.")]


def _all2all_backend(value: str | None) -> str | None:
    from graphsim.costing.all2all import All2AllError, check_backend

    try:
        return None if value is None else check_backend(value)
    except All2AllError as e:
        raise typer.BadParameter(str(e).removeprefix(f"unknown --all2all-backend '{value}'; ")) from None


# vLLM's data-parallel attention + expert parallel (docs/deployment-modes.md); `--ep N` above is graphsim's explicit
# EP size of one TP group (vLLM's TP+EP), kept; `-ep` is not taken as vLLM's short flag to avoid reading like it.
DataParallel = Annotated[int, typer.Option(
    "--data-parallel-size", "-dp", min=1,
    help="vLLM's --data-parallel-size. A MoE model: DP ranks, each with its own attention, batch and KV cache, "
         "sharing the experts (spread over dp × tp GPUs) in lockstep. A dense model: independent replicas.")]
EnableExpertParallel = Annotated[bool, typer.Option(
    "--enable-expert-parallel", help="vLLM's --enable-expert-parallel: whole experts spread over dp × tp GPUs "
                                     "(EP = dp × tp) instead of every expert tensor-sharded over them.")]
All2AllBackendOpt = Annotated[str | None, typer.Option(
    "--all2all-backend", callback=_all2all_backend, metavar="NAME",
    help="vLLM's --all2all-backend for the MoE dispatch/combine with -dp: allgather_reducescatter (vLLM's default), "
         "naive, deepep_high_throughput, deepep_low_latency or pplx.")]
Dtype = Annotated[str | None, typer.Option(
    "--dtype", callback=_model_dtype, metavar="DTYPE",
    help="Model dtype: auto (the config's), bfloat16, float16 (half), float32 (float), as vLLM's --dtype.")]
KvDtype = Annotated[str | None, typer.Option(
    "--kv-dtype", "--kv-cache-dtype", callback=_kv_cache_dtype, metavar="DTYPE",
    help="KV-cache dtype: auto (the model dtype), bfloat16, float16, fp8 (= fp8_e4m3), "
         "fp8_e5m2 or int8.")]


def _moe_routing(value: str | None) -> str | None:
    from graphsim.costing.moe_routing import MoeRoutingError, parse_routing

    try:
        parse_routing(value)  # the command parses it again; a bad value stops here, before any work
    except MoeRoutingError as e:
        raise typer.BadParameter(str(e).removeprefix(f"--moe-routing {value}: ")) from None
    return value


MoeRoutingSpec = Annotated[str | None, typer.Option(
    "--moe-routing", callback=_moe_routing, metavar="MODEL",
    help="How tokens spread over routed experts: balanced, power-law[:ALPHA] (α 1.01 or 1.2, the tables' "
         "exponents) or corpus:FILE.json (measured per-layer expert token counts). Default: power-law:1.2, "
         "aiconfigurator's default; printed with the prediction.")]


def _target_option(default: str = "") -> typer.models.OptionInfo:
    return typer.Option("--target", callback=_fuse_target,
                        help=f"Fuse target, the engine whose kernels to model: vllm or eager.{default}")


Target = Annotated[str, _target_option()]
TargetOrAuto = Annotated[str | None, _target_option(" Default: eager on a CPU (capture or device), vllm otherwise.")]

# vLLM's engine settings, under vLLM's names.
GpuMemoryUtilization = Annotated[float, typer.Option(
    "--gpu-memory-utilization", callback=_fraction, help="Fraction of GPU memory vLLM may use.")]
MaxModelLen = Annotated[int | None, typer.Option(
    "--max-model-len", min=1,
    help="Context length (default: the config's, as vLLM reads it; 2048, the engine's fallback, when it states none).")]
MaxNumBatchedTokens = Annotated[int | None, typer.Option(
    "--max-num-batched-tokens", min=1, help="Token budget per iteration (default: vllm serve's for the GPU).")]
MaxNumSeqs = Annotated[int | None, typer.Option(
    "--max-num-seqs", min=1, help="Most sequences per iteration (default: vllm serve's for the GPU).")]
BlockSize = Annotated[int | None, typer.Option(
    "--block-size", min=1, help="Tokens per KV block (default 16; 64 for MLA).")]
PrefixCaching = Annotated[bool | None, typer.Option(
    "--prefix-caching/--no-prefix-caching", "--enable-prefix-caching/--no-enable-prefix-caching",
    help="Automatic prefix caching (vLLM's --enable-prefix-caching). Default: the --engine version's (off in V0).")]
ChunkedPrefill = Annotated[bool | None, typer.Option(
    "--chunked-prefill/--no-chunked-prefill", "--enable-chunked-prefill/--no-enable-chunked-prefill",
    help="Chunked prefill (vLLM's --enable-chunked-prefill). Default: the --engine version's (V0: only beyond a "
         "32K context).")]
AsyncScheduling = Annotated[bool | None, typer.Option(
    "--async-scheduling/--no-async-scheduling",
    help="vLLM's --async-scheduling: host work overlaps the GPU step. Default: the --engine version's (on from 0.14).")]
ApiServerCount = Annotated[int | None, typer.Option(
    "--api-server-count", "-asc", min=1, max=4096,
    help="vLLM's --api-server-count: API server processes of a deployment, sharing its requests and streams. "
         "Default: the --engine version's (1; the data-parallel size from 0.19).")]
FrontendUs = Annotated[float | None, typer.Option(
    "--frontend-us", min=0, max=1e7,
    help="graphsim's: the API server's serial front-end time a request, in µs, for a server you measured (e.g. the "
         "slope of TTFT over a burst of short prompts). Default: 12,500, fitted on one vLLM 0.10.1 server "
         "(docs/serving.md: other servers measured 2–20 ms).")]
DEFAULT_ENGINE = "vllm"


def _engine(value: str) -> str:
    from graphsim.serving.engine_versions import EngineVersionError, parse_engine

    try:
        parse_engine(value)
    except EngineVersionError as e:
        raise typer.BadParameter(str(e)) from None
    return value


Engine = Annotated[str, typer.Option(
    "--engine", callback=_engine, metavar="ENGINE",
    help="Engine whose kernels, tables, defaults and scheduler to model: vllm (the newest graphsim knows, 0.33), "
         "vllm==0.10.1, vllm==0.6 (families: V0 <= 0.7, V1 0.8-0.13, V1 with async scheduling >= 0.14; "
         "docs/serving.md), sglang (0.5.14) or trtllm (TensorRT-LLM 1.3; docs/engines.md).")]
FromVllmLog = Annotated[str | None, typer.Option(
    "--from-vllm-log", metavar="FILE",
    help="A vLLM server log: its engine args (TP, max_model_len, KV dtype, block size, …), version and available KV "
         "memory set the options not given on the command line; each value taken is printed.")]
KvMemory = Annotated[str | None, typer.Option(
    "--kv-memory", help="Available KV memory per rank as vLLM logs it ('Available KV cache memory: 17.78 GiB'): "
                        "17.78GiB, 17.78 (GiB) or bytes with B.")]

# The interconnect, where it differs from the GPU spec's (graphsim/costing/hardware.py InterconnectOverrides).
LINK_KINDS = ("nvswitch", "nvlink", "pcie-p2p", "pcie")


def _link_kind(value: str | None) -> str | None:
    if value is not None and value not in LINK_KINDS:
        raise typer.BadParameter(f"'{value}' is not a link kind; use {', '.join(LINK_KINDS)}")
    return value


Interconnect = Annotated[str | None, typer.Option(
    "--interconnect", callback=_link_kind, metavar="LINK",
    help="Link between the GPUs of a node: nvswitch, nvlink (every pair linked), pcie-p2p or pcie (no peer-to-peer; "
         "vLLM then runs NCCL only). Default: the GPU spec's.")]
LinkBandwidth = Annotated[float | None, typer.Option(
    "--link-bandwidth", min=0.001, help="GB/s per GPU, one direction, of that link (default: the spec's; PCIe "
                                        "kinds: the spec's PCIe figure).")]
GpusPerNode = Annotated[int | None, typer.Option(
    "--gpus-per-node", min=1, help="GPUs per node: a TP group larger than this spans nodes and its collectives "
                                   "go over the network (default: the spec's).")]
NetworkBandwidth = Annotated[float | None, typer.Option(
    "--network-bandwidth", min=0.001, help="GB/s per GPU, one direction, between nodes (default: the spec's).")]
NetworkLatency = Annotated[float | None, typer.Option(
    "--network-latency-us", min=0, help="Latency between nodes in µs, paid at each network step of a collective "
                                        "(default: the spec's).")]
EnforceEager = Annotated[bool, typer.Option(
    "--enforce-eager", help="vLLM's --enforce-eager: no CUDA graphs, so collectives are priced from eager rows, and "
                            "no torch.compile, so vLLM's custom-op kernels run where Inductor would merge norms and "
                            "elementwise ops.")]
DisableCustomAllReduce = Annotated[bool, typer.Option(
    "--disable-custom-all-reduce", help="vLLM's --disable-custom-all-reduce: all-reduces run symmetric memory or "
                                        "NCCL.")]


def interconnect_data(link: str | None = None, link_bandwidth: float | None = None, gpus_per_node: int | None = None,
                      network_bandwidth: float | None = None, network_latency_us: float | None = None) -> dict[str, Any]:
    """The interconnect options as the document `InterconnectOverrides` checks (options not given left out)."""
    given = {"link": link, "link_bandwidth_gb_s": link_bandwidth, "gpus_per_node": gpus_per_node,
             "network_bandwidth_gb_s": network_bandwidth, "network_latency_us": network_latency_us}
    return {k: v for k, v in given.items() if v is not None}


def hardware_on(gpu: str, interconnect: dict[str, Any]):
    """The hardware spec `gpu` on the interconnect the options describe (`interconnect_data`)."""
    from graphsim.costing.hardware import InterconnectOverrides, load_hardware

    spec = load_hardware(gpu)
    return InterconnectOverrides.model_validate(interconnect).apply(spec) if interconnect else spec


# Measured data.
Profile = Annotated[str | None, typer.Option(
    "--profile", help="profile.db with measured rows (default: $GRAPHSIM_HOME/profiles/<gpu>_vllm.db when present).")]

# Batches (no square brackets: typer's help reads them as rich markup).
BATCH_SPEC = ("prefill:BxN or prefill:BxN@P (B sequences of N new tokens after P cached), decode:BxC "
              "or mixed:BxN@P+BxC")
Batches = Annotated[list[str] | None, typer.Option("--batch", "-b", help=f"{BATCH_SPEC} (repeatable).")]
Batch = Annotated[str, typer.Option("--batch", "-b", help=f"One exact batch: {BATCH_SPEC}.")]

# Captures.
IterationRange = Annotated[str | None, typer.Option(
    "--range", help="Regex over range names that delimit iterations (default: ProfilerStep#N, prefill/decode "
                    "batch specs, step/iteration ranges).")]

# Output.
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]
Limit = Annotated[int, typer.Option("--limit", min=0, help="Rows shown per table.")]
GraphOutput = Annotated[Path | None, typer.Option("-o", "--output", help="Write the resulting graph as JSON here.")]
MaxOps = Annotated[int, typer.Option("--max-ops", min=0, help="Ops shown per module in the tree.")]
Text = Annotated[bool, typer.Option("--text", help="Print the compact text form instead of the tree.")]
Seed = Annotated[int, typer.Option("--seed", help="Seed of the simulated workloads (same seed, same output).")]


def deployment_data(model: str, gpu: str, tp: int = 1, replicas: int = 1, *, dtype: str | None = None,
                    kv_dtype: str | None = None, kv_memory: str | None = None, memory: dict[str, Any] | None = None,
                    interconnect: dict[str, Any] | None = None, data_parallel_size: int = 1,
                    enable_expert_parallel: bool = False, all2all_backend: str | None = None,
                    **engine: Any) -> dict[str, Any]:
    """The deployment options of a command as the document `DeploymentConfig.parse` checks (graphsim/serving/
    config.py): vLLM's field names, `--kv-memory` in bytes, engine settings left out when not given (vLLM's
    defaults for the GPU and model)."""
    from graphsim.serving.capacity import parse_bytes

    if kv_memory:
        engine["kv_cache_memory_bytes"] = parse_bytes(kv_memory)
    return {"model": model, "hardware": gpu, "dtype": dtype, "kv_cache_dtype": kv_dtype,
            "parallel": {"tensor_parallel_size": tp, "data_parallel_size": data_parallel_size, "replicas": replicas,
                         "enable_expert_parallel": enable_expert_parallel, "all2all_backend": all2all_backend},
            "engine": {k: v for k, v in engine.items() if v is not None},
            "memory": {k: v for k, v in (memory or {}).items() if v is not None},
            **({"interconnect": interconnect} if interconnect else {})}


# --- serving: host time and goodput SLOs (simulate, sweep) --------------------------------------
HostTime = Annotated[bool, typer.Option(
    "--host-time/--no-host-time", help="Add the engine's host time (scheduling, input prep, sampling; "
    "docs/serving.md) to every iteration, or price GPU kernels only.")]


def positive_ms(value: float | None) -> float | None:
    """A latency bound in ms: positive and finite (a bound of 0 or less can never be met)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value:g} ms is not a positive, finite time")
    return value


SloTtftMs = Annotated[float | None, typer.Option("--slo-ttft-ms", callback=positive_ms, help="Goodput SLO on TTFT.")]
SloTpotMs = Annotated[float | None, typer.Option("--slo-tpot-ms", callback=positive_ms, help="Goodput SLO on TPOT.")]
SloE2eMs = Annotated[float | None, typer.Option("--slo-e2e-ms", callback=positive_ms,
                                                help="Goodput SLO on end-to-end latency.")]


# --- serving: the synthetic workload and the router (simulate, sweep) ----------------------------
INPUT_LEN, OUTPUT_LEN = "1024:4096", "100:500"  # graphsim's synthetic workloads' default lengths


def _router(value: str) -> str:
    from graphsim.serving.router import RouterPolicy

    if value not in {p.value for p in RouterPolicy}:
        raise typer.BadParameter(f"unknown router '{value}'; use {' or '.join(p.value for p in RouterPolicy)}")
    return value


Replicas = Annotated[int, typer.Option("--replicas", min=1, help="Independent copies of the deployment behind the "
                                       "router (graphsim's; vLLM's --data-parallel-size is -dp).")]
Router = Annotated[str, typer.Option("--router", callback=_router, help="round-robin or least-outstanding.")]
Arrival = Annotated[str, typer.Option("--arrival", help="poisson or gamma (open loop).")]
Cv = Annotated[float, typer.Option("--cv", help="Gamma arrivals: coefficient of variation of the gaps.")]
InputLen = Annotated[str, typer.Option("--input-len", help="N (fixed) or LO:HI (uniform).")]
OutputLen = Annotated[str, typer.Option("--output-len", help="N (fixed) or LO:HI (uniform).")]
SharedPrefix = Annotated[int, typer.Option("--shared-prefix", min=0,
                                           help="Tokens of a shared prompt prefix (synthetic workloads).")]
PrefixGroups = Annotated[int, typer.Option("--prefix-groups", min=1, help="Distinct shared prefixes, drawn uniformly.")]
ThinkS = Annotated[float, typer.Option("--think-s", min=0, help="Closed loop: pause before a client's next request.")]
