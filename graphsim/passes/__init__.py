"""Graph passes: fold repeated layers, fuse aten ops into engine kernels, partition for TP/EP.

    from graphsim.passes import run_pipeline
    run = run_pipeline(graph, "fold,fuse{target=vllm},tp{size=4}")
"""

from graphsim.passes.base import PASSES, Pass, PassError, PassResult, register_pass
from graphsim.passes.pipeline import PipelineRun, parse_pipeline, run_pipeline

__all__ = ["PASSES", "Pass", "PassError", "PassResult", "PipelineRun", "parse_pipeline", "register_pass",
           "run_pipeline"]
