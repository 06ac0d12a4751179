"""Golden text forms before/after each pass on small graphs.

The goldens were generated once and then read line by line against vLLM's layer code (see
docs/vllm-kernels.md); to regenerate after an intended change, run
`GRAPHSIM_UPDATE_GOLDENS=1 python -m pytest tests/passes/test_pass_goldens.py` and review the diff.
"""

import os
from pathlib import Path

import pytest

pytest.importorskip("torch")

from passes_helpers import tiny_config

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.ir import graph_to_text
from graphsim.passes import run_pipeline

GOLDENS = Path(__file__).parent / "goldens"
CASES = {  # case → (catalog model, config overrides)
    "tiny-llama": ("llama-3.1-8b", dict(num_hidden_layers=2)),
    "tiny-qwen3-moe": ("qwen3-30b-a3b", dict(num_hidden_layers=2, num_experts=4, num_experts_per_tok=2,
                                             moe_intermediate_size=32, head_dim=16)),
}
PIPELINE = ["fold", "fuse{target=vllm}", "tp{size=2}", "ep{size=2}"]


def check(name: str, text: str) -> None:
    path = GOLDENS / f"{name}.txt"
    if os.environ.get("GRAPHSIM_UPDATE_GOLDENS"):
        path.write_text(text)
    assert path.is_file(), f"missing golden {path}; set GRAPHSIM_UPDATE_GOLDENS=1 to create it"
    assert text == path.read_text(), f"{name} differs from its golden"


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_pass_matches_its_golden(case):
    name, overrides = CASES[case]
    cfg = tiny_config(name, **overrides)
    graph, _ = import_hf(ResolvedModel(case, cfg, "path", "test"), full_depth=True)
    check(f"{case}.0-import", graph_to_text(graph))
    for i, step in enumerate(PIPELINE, 1):
        graph = run_pipeline(graph, step).graph
        check(f"{case}.{i}-{step.split('{')[0]}", graph_to_text(graph))
