"""Launch files for a deployment the search chose: `launch.sh`, `deployment.yaml`, `prediction.json`.

Every engine instance of the deployment (each replica of each pool) gets one `vllm serve` command line with
every engine setting the prediction assumed, resolved as graphsim resolved it (`plan_deployment`): TP size,
`max_num_seqs`, `max_num_batched_tokens`, `max_model_len`, `gpu_memory_utilization`, the dtypes, the block
size, prefix caching and chunked prefill. The flags are vLLM's own (`vllm/engine/arg_utils.py`,
`EngineArgs.add_cli_args`: `--tensor-parallel-size`, `--max-num-seqs`, `--max-num-batched-tokens`,
`--max-model-len`, `--gpu-memory-utilization`, `--kv-cache-dtype`, `--dtype`, `--block-size`,
`--enable-prefix-caching`, `--enable-chunked-prefill` (`--no-…` to turn them off), `--enable-expert-parallel`,
`--prefill-context-parallel-size` and `--decode-context-parallel-size` in its parallel group, `--kv-transfer-config`). A disaggregated deployment's instances get
`--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'` and a distinct
`VLLM_NIXL_SIDE_CHANNEL_PORT` per instance on a host, as vLLM's NixlConnector guide shows
(https://docs.vllm.ai/en/stable/features/nixl_connector_usage.html); the proxy that routes a request to a
prefill then a decode instance is the guide's and is named in a comment, not launched.

`deployment.yaml` holds one Kubernetes Deployment and Service per pool (replicas = instances of the pool,
`nvidia.com/gpu` = its TP size, `vllm serve` with the same arguments, the image `vllm/vllm-openai` of vLLM's
Kubernetes guide https://docs.vllm.ai/en/stable/deployment/k8s.html). Disaggregated pods set
`VLLM_NIXL_SIDE_CHANNEL_HOST` to the pod IP (the NixlConnector guide: the host the side channel listens on).
It is written in YAML's block style without a YAML library (strings JSON-quoted: valid YAML).

`prediction.json` holds the deployment, the target, every instance's arguments and the predicted figures
with their sources. Each file is written atomically (`graphsim.atomic.atomic_writer`).

A search for SGLang or TensorRT-LLM (`--engine sglang|trtllm`) writes `python -m sglang.launch_server` /
`trtllm-serve` command lines instead, under those engines' option names (serving/launch_engines.py; TensorRT-LLM's
LLM-API fields go to `extra_llm_api_options.yaml` beside launch.sh).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphsim.atomic import atomic_writer
from graphsim.serving.search_space import Candidate, PoolConfig, SearchSpec

BASE_PORT = 8000  # vllm serve's default --port (vllm/entrypoints/openai/cli_args.py)
NIXL_SIDE_CHANNEL_PORT = 5600  # the NixlConnector guide's first side-channel port (one per instance on a host)
NIXL_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}  # the NixlConnector guide's --kv-transfer-config
IMAGE = "vllm/vllm-openai:latest"  # vLLM's Kubernetes guide
# SGLang's and TensorRT-LLM's published images (docs: sgl-project/sglang docker, NGC tensorrt-llm release)
ENGINE_IMAGES = {"sglang": "lmsysorg/sglang:latest", "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:latest"}


@dataclass(frozen=True)
class Instance:
    name: str  # agg-0, prefill-0, decode-1, …
    role: str
    pool: int  # index in the candidate's pools
    node: int
    gpu_ids: tuple[int, ...]  # on its node
    port: int
    argv: tuple[str, ...]  # after the program (`vllm serve`)
    env: tuple[tuple[str, str], ...] = ()
    program: tuple[str, ...] = ("vllm", "serve")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "node": self.node, "gpu_ids": list(self.gpu_ids),
                "port": self.port, "command": [*self.program, *self.argv], "env": dict(self.env)}


def served_model(model: str) -> str:
    """What `vllm serve` loads: the catalog entry's Hugging Face id, else the model argument as given."""
    from graphsim.catalog import _find_entry

    e = _find_entry(model)
    return e.hf_id if e is not None else model


def engine_settings(spec: SearchSpec, pool: PoolConfig) -> dict[str, Any]:
    """The engine settings the prediction assumed for one instance of `pool`, resolved (vLLM's names)."""
    from graphsim.serving.deployment import plan_deployment

    config = spec.base.derive(tensor_parallel_size=pool.tp, max_num_batched_tokens=pool.max_num_batched_tokens,
                              max_num_seqs=pool.max_num_seqs)
    if pool.pp > 1:  # vLLM's --pipeline-parallel-size (serving/pipeline_plan.py)
        from graphsim.serving.pipeline_plan import with_pipeline_size

        config = with_pipeline_size(config, pool.pp)
    if pool.dp > 1:  # vLLM's --data-parallel-size with --enable-expert-parallel (serving/dp_search.py)
        from graphsim.serving.dp_search import dp_config

        config = dp_config(spec.base, pool)
    if (pool.pcp, pool.dcp) != (1, 1):  # vLLM's --prefill-/--decode-context-parallel-size (serving/cp_search.py)
        from graphsim.serving.context_parallel import with_context_parallel

        config = with_context_parallel(config, pool.pcp, pool.dcp)
    dep = plan_deployment(config)
    e = dep.engine
    if not e.profile.is_vllm:
        from graphsim.serving.launch_engines import engine_settings as other

        return other(e.profile.engine, dep, pool.tp, pool.ep, spec.base.dtype, spec.base.kv_cache_dtype)
    return {"tensor_parallel_size": pool.tp, "max_num_seqs": e.max_num_seqs,
            "max_num_batched_tokens": e.max_num_batched_tokens, "max_model_len": e.max_model_len,
            "gpu_memory_utilization": e.gpu_memory_utilization, "dtype": spec.base.dtype or "auto",
            "kv_cache_dtype": spec.base.kv_cache_dtype or "auto",
            "block_size": e.block_size if e.block_size is not None else dep.layout.block_size,
            "enable_prefix_caching": e.enable_prefix_caching, "enable_chunked_prefill": e.enable_chunked_prefill,
            "enable_expert_parallel": pool.ep > 1, **({"pipeline_parallel_size": pool.pp} if pool.pp > 1 else {}),
            **({"data_parallel_size": pool.dp} if pool.dp > 1 else {}),
            **{k: v for k, v in (("prefill_context_parallel_size", dep.config.parallel.prefill_context_parallel_size),
                                 ("decode_context_parallel_size", dep.config.parallel.decode_context_parallel_size))
               if v > 1},
            **({"speculative_config": spec.base.speculative_config.model_dump(exclude_none=True)}
               if spec.base.speculative_config else {})}


def _fmt(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def serve_argv(model: str, settings: dict[str, Any], port: int, disagg: bool, role: str = "agg") -> list[str]:
    """`vllm serve` arguments for one instance (SGLang / TensorRT-LLM: their program's, launch_engines.py)."""
    if "engine" in settings:
        from graphsim.serving.launch_engines import engine_argv

        return engine_argv(model, settings, port, role if disagg else None)
    argv = [model, "--port", str(port)]
    for key in ("tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
                "gpu_memory_utilization", "dtype", "kv_cache_dtype", "block_size"):
        argv += ["--" + key.replace("_", "-"), _fmt(settings[key])]
    for key in ("enable_prefix_caching", "enable_chunked_prefill"):
        flag = key.replace("_", "-")
        argv.append(f"--{flag}" if settings[key] else f"--no-{flag}")
    if settings.get("pipeline_parallel_size", 1) > 1:
        argv += ["--pipeline-parallel-size", str(settings["pipeline_parallel_size"])]
    if settings.get("data_parallel_size", 1) > 1:  # one engine of dp lockstep ranks (serving/dp_search.py)
        argv += ["--data-parallel-size", str(settings["data_parallel_size"])]
    for key in ("prefill_context_parallel_size", "decode_context_parallel_size"):  # vLLM's EngineArgs names
        if settings.get(key, 1) > 1:
            argv += ["--" + key.replace("_", "-"), str(settings[key])]
    if settings["enable_expert_parallel"]:
        argv.append("--enable-expert-parallel")
    if settings.get("speculative_config"):  # vLLM's --speculative-config JSON (serving/speculative.py)
        argv += ["--speculative-config", json.dumps(settings["speculative_config"], separators=(",", ":"))]
    if disagg:
        argv += ["--kv-transfer-config", json.dumps(NIXL_CONFIG, separators=(",", ":"))]
    return argv


def plan_instances(spec: SearchSpec, c: Candidate, replicas: int, gpus_per_node: int,
                   settings: list[dict[str, Any]] | None = None) -> list[Instance]:
    """Every engine instance of `replicas` copies of `c`, packed onto nodes of `gpus_per_node` GPUs in order
    (an instance never spans nodes: its TP group stays in one node)."""
    model = served_model(spec.base.model)
    settings = settings or [engine_settings(spec, p) for p in c.pools]
    disagg = c.mode == "disagg"
    out: list[Instance] = []
    node, used, count = 0, 0, {}
    per_node: dict[int, int] = {}
    for _ in range(replicas):
        for k, pool in enumerate(c.pools):
            for _i in range(pool.instances):
                width = min(pool.tp * pool.pp * pool.pcp * pool.dp, gpus_per_node)  # a pipeline wider than a node starts on a fresh one
                if used + width > gpus_per_node:
                    node, used = node + 1, 0
                n = count.get(pool.role, 0)
                count[pool.role] = n + 1
                slot = per_node.get(node, 0)
                per_node[node] = slot + 1
                port = BASE_PORT + slot
                env = (("VLLM_NIXL_SIDE_CHANNEL_PORT", str(NIXL_SIDE_CHANNEL_PORT + slot)),) if disagg else ()
                if "engine" in settings[k]:  # SGLang / TensorRT-LLM: no vLLM NIXL side channel
                    from graphsim.serving.launch_engines import PROGRAMS

                    out.append(Instance(f"{pool.role}-{n}", pool.role, k, node, tuple(range(used, used + pool.tp)),
                                        port, tuple(serve_argv(model, settings[k], port, disagg, pool.role)), (),
                                        PROGRAMS[settings[k]["engine"]]))
                else:
                    out.append(Instance(f"{pool.role}-{n}", pool.role, k, node, tuple(range(used, used + width)),
                                        port, tuple(serve_argv(model, settings[k], port, disagg)), env))
                used += width
                if pool.tp * pool.pp * pool.pcp > gpus_per_node:  # its other stages / CP ranks fill whole nodes after
                    node, used = node + -(-pool.tp * pool.pp * pool.pcp // gpus_per_node) - 1, gpus_per_node
    return out


def launch_sh(instances: list[Instance], header: str) -> str:
    """A bash script starting every instance of one node (NODE=k, default 0) in the background."""
    lines = ["#!/usr/bin/env bash", *(f"# {h}" for h in header.splitlines()), "set -euo pipefail",
             'NODE="${NODE:-0}"', ""]
    if any(i.program == ("trtllm-serve",) for i in instances):  # extra_llm_api_options.yaml lies beside this script
        lines[-1:-1] = ['cd "$(dirname "$0")"']
    for node in sorted({i.node for i in instances}):
        lines.append(f'if [ "$NODE" = "{node}" ]; then')
        for i in (x for x in instances if x.node == node):
            env = " ".join(f"{k}={shlex.quote(v)}" for k, v in (("CUDA_VISIBLE_DEVICES", ",".join(map(str, i.gpu_ids))),
                                                                 *i.env))
            args = " \\\n    ".join(_pairs(i.argv))
            lines += [f"  # {i.name}", f"  {env} {' '.join(i.program)} {args} &"]
        lines += ["fi", ""]
    prefill = [i for i in instances if i.role == "prefill"]
    decode = [i for i in instances if i.role == "decode"]
    if prefill and prefill[0].program != ("vllm", "serve"):
        lines += ["# route requests through the engine's prefill/decode router (SGLang: sglang_router.launch_router "
                  "--pd-disaggregation; TensorRT-LLM: trtllm-serve disaggregated -c CONFIG):",
                  f"#   prefill ports {' '.join(str(i.port) for i in prefill)}, decode ports "
                  f"{' '.join(str(i.port) for i in decode)}  (hosts: node of each instance)"]
    elif prefill:
        lines += ["# route requests through the NixlConnector guide's proxy "
                  "(tests/v1/kv_connector/nixl_integration/toy_proxy_server.py in vLLM's repository):",
                  f"#   --prefiller-ports {' '.join(str(i.port) for i in prefill)}"
                  f" --decoder-ports {' '.join(str(i.port) for i in decode)}  (hosts: node of each instance)"]
    lines.append("wait")
    return "\n".join(lines) + "\n"


def _pairs(argv: tuple[str, ...]) -> list[str]:
    """Arguments quoted and grouped as `--flag value` per line."""
    out: list[str] = [shlex.quote(argv[0])]
    k = 1
    while k < len(argv):
        if k + 1 < len(argv) and not argv[k + 1].startswith("--"):
            out.append(f"{argv[k]} {shlex.quote(argv[k + 1])}")
            k += 2
        else:
            out.append(argv[k])
            k += 1
    return out


def parse_launch_sh(text: str) -> list[list[str]]:
    """The argument lists after the program (`vllm serve`, `python -m sglang.launch_server`, `trtllm-serve`) of a
    launch.sh (for checks): every command line, in order."""
    from graphsim.serving.launch_engines import PROGRAMS

    joined = text.replace("\\\n", " ")
    out = []
    for line in joined.splitlines():
        s = line.strip()
        if s.startswith("#"):
            continue
        words = shlex.split(s)
        for program in PROGRAMS.values():
            k = next((i for i in range(len(words)) if tuple(words[i:i + len(program)]) == program), None)
            if k is not None:
                rest = words[k + len(program):]
                out.append(rest[:-1] if rest and rest[-1] == "&" else rest)
                break
    return out


def k8s_documents(spec: SearchSpec, c: Candidate, replicas: int, settings: list[dict[str, Any]], name: str
                  ) -> list[dict[str, Any]]:
    """One Deployment and one Service per pool."""
    model = served_model(spec.base.model)
    docs: list[dict[str, Any]] = []
    disagg = c.mode == "disagg"
    for k, pool in enumerate(c.pools):
        app = f"{name}-{pool.role}"
        argv = serve_argv(model, settings[k], BASE_PORT, disagg, pool.role)
        engine = settings[k].get("engine", "vllm")
        env = [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
               {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_SIDE_CHANNEL_PORT)}] \
            if disagg and engine == "vllm" else []
        from graphsim.serving.launch_engines import PROGRAMS

        container: dict[str, Any] = {"name": engine, "image": ENGINE_IMAGES.get(engine, IMAGE),
                                     "command": list(PROGRAMS[engine]), "args": argv,
                                     "ports": [{"containerPort": BASE_PORT}],
                                     "resources": {"limits": {"nvidia.com/gpu": pool.tp * pool.pp * pool.pcp},
                                                   "requests": {"nvidia.com/gpu": pool.tp * pool.pp * pool.pcp}}}
        if env:
            container["env"] = env
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment",
                     "metadata": {"name": app, "labels": {"app": app, "graphsim/role": pool.role}},
                     "spec": {"replicas": pool.instances * replicas, "selector": {"matchLabels": {"app": app}},
                              "template": {"metadata": {"labels": {"app": app}}, "spec": {"containers": [container]}}}})
        docs.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": app},
                     "spec": {"selector": {"app": app}, "ports": [{"port": BASE_PORT, "targetPort": BASE_PORT}]}})
    return docs


def to_yaml(docs: list[dict[str, Any]]) -> str:
    """Block-style YAML of JSON-like documents (strings JSON-quoted), separated by `---`."""
    return "".join("---\n" + "".join(_yaml(d, 0)) for d in docs)


def _scalar(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, (int, float)):
        return _fmt(v)
    return json.dumps(str(v))


def _key(k: str) -> str:
    """A mapping key: plain when it is a simple name, JSON-quoted otherwise."""
    return k if k and k[0].isalpha() and all(ch.isalnum() or ch in "_./-" for ch in k) else json.dumps(k)


def _yaml(v: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out.append(f"{pad}{_key(k)}:\n")
                out += _yaml(x, indent + 2)
            else:
                out.append(f"{pad}{_key(k)}: {_scalar(x) if not isinstance(x, (dict, list)) else json.dumps(x)}\n")
    else:
        for x in v:
            if isinstance(x, (dict, list)) and x:
                sub = _yaml(x, indent + 2)
                out.append(f"{pad}- {sub[0].lstrip()}")
                out += sub[1:]
            else:
                out.append(f"{pad}- {_scalar(x) if not isinstance(x, (dict, list)) else json.dumps(x)}\n")
    return out


def prepare_save_dir(save_dir: str | Path) -> Path:
    """`save_dir` created and checked writable now (the one-line error otherwise), before a long search."""
    from graphsim.atomic import check_path_name, check_writable, output_error

    d = Path(save_dir)
    check_path_name(d)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise output_error(d, e) from None
    for name in ("launch.sh", "deployment.yaml", "prediction.json"):
        check_writable(d / name)
    return d


def write_launch_files(save_dir: str | Path, spec: SearchSpec, c: Candidate, replicas: int, gpus_per_node: int,
                       prediction: dict[str, Any]) -> list[Path]:
    """launch.sh, deployment.yaml and prediction.json for `replicas` copies of `c` in `save_dir` (created)."""
    d = prepare_save_dir(save_dir)
    settings = [engine_settings(spec, p) for p in c.pools]
    instances = plan_instances(spec, c, replicas, gpus_per_node, settings)
    gpus = c.unit_gpus * replicas
    header = (f"graphsim search: {dataclasses.replace(c, replicas=1).label()} × {replicas} replica(s), {gpus} GPU(s) on "
              f"{max(i.node for i in instances) + 1} node(s) of {gpus_per_node}; run on node k with NODE=k")
    doc = {"deployment": {"candidate": c.to_json(), "replicas": replicas, "gpus": gpus, "gpus_per_node": gpus_per_node,
                          "model": served_model(spec.base.model), "hardware": spec.base.hardware,
                          "engine_settings": [{"role": p.role, "instances_per_replica": p.instances, **s}
                                              for p, s in zip(c.pools, settings, strict=True)]},
           "instances": [i.to_json() for i in instances], **prediction}
    files = {"launch.sh": launch_sh(instances, header),
             "deployment.yaml": to_yaml(k8s_documents(spec, c, replicas, settings, _k8s_name(spec.base.model))),
             "prediction.json": json.dumps(doc, indent=1, default=float) + "\n"}
    if settings and settings[0].get("engine") == "trtllm":  # the LLM-API fields without a trtllm-serve flag
        from graphsim.serving.launch_engines import TRTLLM_OPTIONS_FILE, trtllm_options_yaml

        files[TRTLLM_OPTIONS_FILE] = trtllm_options_yaml(settings[0], c.mode == "disagg")
    out = []
    for fname, text in files.items():
        path = d / fname
        with atomic_writer(path) as f:
            f.write(text)
        out.append(path)
    (d / "launch.sh").chmod(0o755)
    return out


def _k8s_name(model: str) -> str:
    """A DNS-1123 label from the model name."""
    base = "".join(ch if ch.isalnum() else "-" for ch in Path(model).name.lower()).strip("-")
    return (base or "model")[:40].rstrip("-")
