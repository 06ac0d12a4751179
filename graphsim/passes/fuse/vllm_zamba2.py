"""vLLM fuse rule for Zamba2's leftover ops, which were priced as approximate placeholders (4.1 % of its tiny decode
step). vLLM's port runs them as written (vllm/model_executor/models/zamba2.py), one PyTorch kernel each on the
custom-op path, named and priced by the bytes they move (vllm_gemma3n.port_op_kernel), no longer approximate:

- Zamba2AttentionDecoderLayer.forward: `torch.concatenate([hidden_states, original_hidden_states], dim=-1)` before
  the shared block's input norm (one cat, 2 x hidden a token read and written);
- Zamba2MLP.forward: `gate_up_states = gate_up_states + lora_output` (the shared MLP's per-position LoRA adapter
  added to gate_up_proj: an add reading two tensors of 2 x intermediate a token);
- Zamba2Model.forward: `original_hidden_states = torch.clone(hidden_states)` (one copy of the embeddings a step).
"""

from __future__ import annotations

from graphsim.passes.fuse.core import FuseContext, Rule
from graphsim.passes.fuse.vllm_gemma3n import leftover_ops_in, port_op_kernel

# transformers' Zamba2 modules whose leftover ops vLLM's port runs as written
ZAMBA2_MODULES = {"Zamba2AttentionDecoderLayer", "Zamba2MLP", "Zamba2Model"}


def _match(ctx: FuseContext):
    return leftover_ops_in(ctx, ZAMBA2_MODULES, "zamba2_ops")


ZAMBA2_OPS = Rule(
    "zamba2_ops", "model_executor/models/zamba2.py Zamba2AttentionDecoderLayer.forward (torch.concatenate), "
    "Zamba2MLP.forward (gate_up_states + lora_output), Zamba2Model.forward (torch.clone of the embeddings): one "
    "kernel each", _match, port_op_kernel,
)

RULES: list[Rule] = [ZAMBA2_OPS]
