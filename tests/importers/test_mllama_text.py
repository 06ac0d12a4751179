"""MLlama's text model (Llama-3.2-Vision's `MllamaForCausalLM`) skips its cross-attention layers by position on a
text-only request (`MllamaTextModel.forward`: `idx in self.cross_attention_layers`), as vLLM's mllama.py does without
image tokens (`skip_cross_attention`). Cut to its representatives the positions no longer matched (the kept
cross-attention layer ran with no image states: AttributeError on the empty cache); the stack is now traced whole
(importers/hf/layers.py `skips_layers_by_position`) and the fold pass keeps the layers that ran. Zamba2 indexes its
hybrid layers' adapters by position the same way (slow test)."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.importers.hf import import_hf
from graphsim.passes import run_pipeline

# 5 layers, cross-attention at 1 and 3: 3 self-attention layers run on the text path
TINY_MLLAMA_TEXT = {
    "architectures": ["MllamaForCausalLM"], "model_type": "mllama_text_model", "vocab_size": 96, "hidden_size": 32,
    "intermediate_size": 64, "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
    "cross_attention_layers": [1, 3], "max_position_embeddings": 256, "rope_theta": 500000.0,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
}


def test_text_path_traces_the_self_attention_layers_only():
    g, report = import_hf(ResolvedModel("tiny-mllama", copy.deepcopy(TINY_MLLAMA_TEXT), "path", "test"), cache=False)
    assert g.meta.full_depth and report.traced_layers == [0, 1, 2, 3, 4]
    layers_with_nodes = sorted({n.layer for n in g.nodes if n.layer is not None})
    assert layers_with_nodes == [0, 2, 4]  # the cross-attention layers 1 and 3 are skipped by the forward
    # every parameter is still counted (vLLM loads the cross-attention layers too): 5 layers' worth, not 3
    per_self = 4 * 32 * 8 * 2 + 2 * 32 * 8 * 2 + 3 * 32 * 64 + 2 * 32  # q,o 32x32; k,v 32x16; gate/up/down; 2 norms
    assert report.param_count > (96 + 8) * 32 + 96 * 32 + 4.5 * per_self  # (+8: the image tokens' embedding rows)
    folded = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm},tp{size=2}").graph
    assert folded.schedule is not None and len(folded.schedule.tags) == 3


# Zamba2: 6 layers, hybrid (shared attention block + that layer's own LoRA adapter) at 2 and 4
TINY_ZAMBA2 = {
    "architectures": ["Zamba2ForCausalLM"], "model_type": "zamba2", "vocab_size": 96, "hidden_size": 64,
    "num_hidden_layers": 6, "layers_block_type": ["mamba", "mamba", "hybrid", "mamba", "hybrid", "mamba"],
    "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 128, "mamba_d_state": 16,
    "mamba_expand": 2, "n_mamba_heads": 8, "mamba_ngroups": 1, "chunk_size": 32, "adapter_rank": 8,
    "max_position_embeddings": 256, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
}


@pytest.mark.slow
def test_zamba2_positions_reach_the_hybrid_adapters():
    # Zamba2Model.forward hands each layer its position; the shared block maps it through layer_dic
    # (config.hybrid_layer_ids = [2, 4]) to that hybrid layer's adapter. Cut to representatives (layers 0 and 2 at
    # positions 0 and 1) the lookup layer_dic[1] failed (KeyError: 1 at every real Zamba2 size); traced whole, the
    # fold keeps the mamba type and each hybrid layer (its own adapter weights)
    g, report = import_hf(ResolvedModel("tiny-zamba2", copy.deepcopy(TINY_ZAMBA2), "path", "test"), cache=False)
    assert g.meta.full_depth and report.dynamic_tokens
    folded = run_pipeline(copy.deepcopy(g), "fold,fuse{target=vllm}").graph
    assert folded.schedule is not None and len(folded.schedule.tags) == 6
    hybrid_tags = {folded.schedule.tags[i] for i in (2, 4)}
    assert len({folded.schedule.tags[i] for i in (0, 1, 3, 5)}) == 1 and not hybrid_tags & {folded.schedule.tags[0]}
