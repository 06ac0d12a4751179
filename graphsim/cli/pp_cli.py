"""The CLI's pipeline-parallel glue (`-pp`, `--pp-layer-partition`): split a cost model, report its stages."""

from __future__ import annotations

from typing import Any

from graphsim.costing.cost_model import CostModel
from graphsim.costing.pipeline import partition_from_env, stage_times, with_pipeline
from graphsim.workload import Step


def partition_of(given: str | None) -> str | None:
    """--pp-layer-partition, else VLLM_PP_LAYER_PARTITION from the environment (vLLM reads the same)."""
    return given if given is not None else partition_from_env()


def pipelined(cm: CostModel, pp: int, partition: str | None) -> CostModel:
    """`cm` split into `pp` stages (itself at pp 1 without a partition given on the command line)."""
    if pp == 1 and partition is None:
        return cm
    return with_pipeline(cm, pp, partition_of(partition))


def pipeline_json(cm: CostModel, steps: list[Step], specs: list[str]) -> dict[str, Any]:
    """{"pipeline": …} for --json of a pipelined cost model ({} for an unsplit one)."""
    times = stage_times(cm, steps, specs)
    split = getattr(cm, "split", None)
    if not times or split is None:
        return {}
    return {"pipeline": {"pipeline_parallel_size": split.pp, "tensor_parallel_size": split.tp,
                         "world_size": split.pp * split.tp, "layers_per_stage": list(split.layers),
                         "batches": [t.to_json() for t in times]}}


def print_pipeline(console: Any, cm: CostModel, steps: list[Step], specs: list[str]) -> None:
    times = stage_times(cm, steps, specs)
    split = getattr(cm, "split", None)
    if times and split is not None:
        from graphsim.render.pipeline_view import pipeline_table

        console.print(pipeline_table(times, f"pp {split.pp} × tp {split.tp}: {split.describe()}"))


def with_pp(config: Any, pp: int, partition: str | None) -> Any:
    """A `DeploymentConfig` with vLLM's pipeline-parallel size and layer partition set (checked again)."""
    if pp == 1 and partition is None:
        return config
    from graphsim.serving.pipeline_plan import with_pipeline_size

    return with_pipeline_size(config, pp, partition)


def print_kv_stages(console: Any, dep: Any) -> None:
    """The per-stage weights and KV capacity of a pipelined deployment (nothing for one stage)."""
    from graphsim.serving.pipeline_plan import PipelinedDeployment

    if isinstance(dep, PipelinedDeployment) and dep.stages:
        from graphsim.render.pipeline_view import kv_stage_table

        console.print(kv_stage_table(dep))


def check_alone(pp: int, partition: str | None, **others: Any) -> None:
    """Refuse, by name, the modes not modelled together with pipeline parallelism (before any trace): each of
    `others` is the value of one such option (off: None, False, 0 or 1)."""
    if pp == 1 and partition is None:
        return
    names = {"data_parallel_size": "--data-parallel-size", "afd": "--afd", "speculative_config": "--speculative-config",
             "context_parallel": "context parallelism"}
    for key, value in others.items():
        if value not in (None, False, 0, 1, ""):
            from graphsim.costing.pipeline import PipelineError

            raise PipelineError(f"{names.get(key, key)} with --pipeline-parallel-size is not modelled; drop one of them")
