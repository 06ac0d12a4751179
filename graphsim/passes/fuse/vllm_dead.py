"""vLLM fuse rule: integer / bool computations whose result nothing uses launch no kernel.

A modelling file may compute index or mask bookkeeping that graphsim's semantic attention never reads: GIT's
`GitModel.forward` builds `token_type_ids = zeros_like(embedding_output, dtype=int)[..., 0]` and
`group_ids = torch.where(token_type_ids == 1, 0, -1)` for `create_causal_mask`'s image block, which a text-only
request under `graphsim::attention` (no materialised mask) leaves unread; the mask's own checks, which read it, are
dropped at import. A vLLM port computes nothing of the kind (its attention metadata is built by the engine), so
such dead nodes are absorbed: a free node with an integer or bool output, not a graph output, whose every user is
such a node too. A floating-point value nothing uses is left to the other rules (it would be a model's real output
or a bug worth seeing).
"""

from __future__ import annotations

from graphsim.ir import Node, value_name
from graphsim.passes.fuse.core import Candidate, FuseContext, Rule


def _match_dead_index_ops(ctx: FuseContext) -> list[Candidate]:
    outputs = set(ctx.graph.outputs)
    dead: dict[str, Node] = {}
    for n in reversed(ctx.graph.nodes):
        if not ctx.is_free(n) or not n.outputs or any(o.dtype.is_float for o in n.outputs):
            continue
        values = [value_name(n.name, i) for i in range(len(n.outputs))]
        if any(v in outputs for v in values):
            continue
        if all(u.name in dead for v in values for u in ctx.users.get(v, [])):
            dead[n.name] = n
    return [Candidate([n]) for n in sorted(dead.values(), key=lambda n: ctx.pos[n.name])]


DEAD_INDEX_OPS = Rule(
    "dead_index_ops", "no kernel: integer / bool bookkeeping nothing reads (e.g. transformers models/git/"
    "modeling_git.py GitModel.forward's group_ids for an image block mask, unread on the text path)",
    _match_dead_index_ops, lambda ctx, c: None,
)
