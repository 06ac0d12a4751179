"""Mechanisms refused by name before the trace (graphsim/importers/hf/refusals.py): Musicgen's codebook token
streams, XLM's parallel per-layer lists, X-MOD's per-language adapters, xLSTM's mLSTM recurrence; each line says vLLM
has no implementation of the class. Each was the traceback line of whatever the
meta-device forward hit first (a reshape by num_codebooks, an IndexError on a cut list, "Input language unknown")."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from graphsim.catalog import ResolvedModel
from graphsim.errors import UnsupportedArchitectureError
from graphsim.importers.hf import import_hf

TINY = {
    "MusicgenForCausalLM": {"model_type": "musicgen_decoder", "vocab_size": 64, "hidden_size": 32,
                            "num_hidden_layers": 6, "num_attention_heads": 4, "ffn_dim": 64, "num_codebooks": 4,
                            "max_position_embeddings": 256, "pad_token_id": 0, "bos_token_id": 1},
    "XLMWithLMHeadModel": {"model_type": "xlm", "vocab_size": 64, "emb_dim": 32, "n_layers": 2, "n_heads": 4,
                           "max_position_embeddings": 256, "pad_index": 0, "bos_index": 1, "eos_index": 2,
                           "unk_index": 3, "mask_index": 4},
    "XmodForCausalLM": {"model_type": "xmod", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "intermediate_size": 64, "languages": ["en_XX", "de_DE"],
                        "max_position_embeddings": 256, "is_decoder": True, "pad_token_id": 1, "bos_token_id": 0,
                        "eos_token_id": 2},
    "xLSTMForCausalLM": {"model_type": "xlstm", "vocab_size": 64, "hidden_size": 64, "num_heads": 4, "num_hidden_layers": 2,
                         "num_blocks": 2, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
}
MATCH = {
    "MusicgenForCausalLM": r"reads 4 codebook token streams per position \(MusicgenDecoder",
    "XLMWithLMHeadModel": r"parallel per-layer lists \(XLMModel: attentions, ffns",
    "XmodForCausalLM": r"its language's adapter \(XmodOutput\.adapter_modules over 2 language",
    "xLSTMForCausalLM": r"mLSTM matrix-memory recurrence \(xLSTMBackend\.chunkwise_kernel_fn",
}
# vllm 0.33.0's registry has none of them; its `_try_resolve_transformers` takes a transformers class only when
# is_backend_compatible() or _can_set_attn_implementation() (transformers 5.24: XLMWithLMHeadModel False / False,
# the other three False or True / True, read once by hand from the classes)
GENERIC = {"MusicgenForCausalLM": True, "XLMWithLMHeadModel": False, "XmodForCausalLM": True, "xLSTMForCausalLM": True}


@pytest.mark.parametrize("arch", sorted(TINY))
def test_refused_by_mechanism(arch):
    cfg = {"architectures": [arch], **copy.deepcopy(TINY[arch])}
    with pytest.raises(UnsupportedArchitectureError, match=MATCH[arch]) as e:
        import_hf(ResolvedModel(f"tiny-{arch}", cfg, "path", "test"), cache=False)
    line = str(e.value)
    assert "\n" not in line and f"vLLM has no implementation of {arch} (none in vllm 0.33.0's model registry" in line
    generic = "only its generic Transformers backend would run transformers' own forward"
    refused = "its Transformers backend refuses the class as not compatible with vLLM"
    assert (generic if GENERIC[arch] else refused) in line and (refused if GENERIC[arch] else generic) not in line


@pytest.mark.parametrize("arch", ["Gemma4AssistantForCausalLM", "Gemma4UnifiedAssistantForCausalLM"])
def test_a_drafter_reading_its_targets_kv_is_refused_as_a_draft(arch):
    # Gemma-4's assistants: forward(..., shared_kv_states) reads the target's K/V (Q-only layers); vLLM runs them
    # only as a draft (vllm 0.33.0 config/speculative.py: model_type gemma4_assistant → Gemma4MTPModel)
    import transformers

    text = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16,
            "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 32,
            "hidden_size_per_layer_input": 0, "vocab_size_per_layer_input": 0}
    config_class = getattr(transformers, arch.replace("ForCausalLM", "Config"))
    cfg = {**config_class(text_config=text, backbone_hidden_size=64).to_dict(), "architectures": [arch]}
    cfg.pop("transformers_version", None)
    with pytest.raises(UnsupportedArchitectureError, match=rf"cannot trace {arch}: it is a speculative drafter whose "
                       r"forward reads its target model's KV states \(shared_kv_states.*vLLM runs it only as the "
                       r"draft of its target"):
        import_hf(ResolvedModel(f"tiny-{arch}", cfg, "path", "test"), cache=False)
