"""A tiny remote-code snapshot written into a test's directory: config.json with `auto_map`, its own configuration
and modelling files (a Llama-like decoder in plain torch under a made-up name, "Wombat", whose model_type
transformers does not know). The attention calls transformers' attention interface by the config's
`_attn_implementation` (as remote code written for transformers ≥ 4.48 does), falling back to plain torch."""

from __future__ import annotations

import json
from pathlib import Path

CONFIG = {
    "architectures": ["WombatForCausalLM"], "model_type": "wombat",
    "auto_map": {"AutoConfig": "configuration_wombat.WombatConfig",
                 "AutoModelForCausalLM": "modeling_wombat.WombatForCausalLM"},
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "max_position_embeddings": 4096, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}

CONFIGURATION = '''
from transformers import PretrainedConfig


class WombatConfig(PretrainedConfig):
    model_type = "wombat"

    def __init__(self, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=256, rms_norm_eps=1e-5, rope_theta=10000.0, **kwargs):
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_key_value_heads
        self.vocab_size = vocab_size
        self.rms_norm_eps = rms_norm_eps
        self.rope_theta = rope_theta
        super().__init__(**kwargs)
'''

MODELING = '''
import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .configuration_wombat import WombatConfig
{extra}

class WombatNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def rotate(x, theta):
    d = x.shape[-1]
    pos = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = pos[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1).to(x.dtype), torch.cat([ang.sin(), ang.sin()], -1).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def plain_attention(module, q, k, v, mask, scaling, **kwargs):
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling)
    return out.transpose(1, 2), None


class WombatAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.is_causal = True
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = rotate(q, self.config.rope_theta), rotate(k, self.config.rope_theta)
        impl = ALL_ATTENTION_FUNCTIONS.get(self.config._attn_implementation, plain_attention)
        out, _ = impl(self, q, k, v, None, scaling=self.head_dim ** -0.5)
        return self.o_proj(out.reshape(b, s, -1))


class WombatMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class WombatBlock(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_norm = WombatNorm(config.hidden_size, config.rms_norm_eps)
        self.attn = WombatAttention(config, layer_idx)
        self.post_norm = WombatNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = WombatMLP(config)

    def forward(self, x):
        x = x + self.attn(self.input_norm(x))
        return x + self.mlp(self.post_norm(x))


class WombatPreTrainedModel(PreTrainedModel):
    config_class = WombatConfig
    base_model_prefix = "model"
    _supports_attention_backend = True


class WombatModel(WombatPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(WombatBlock(config, i) for i in range(config.num_hidden_layers))
        self.norm = WombatNorm(config.hidden_size, config.rms_norm_eps)
        self.post_init()

    def forward(self, input_ids):
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class WombatForCausalLM(WombatPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = WombatModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def forward(self, input_ids=None, use_cache=None, return_dict=None, **kwargs):
        return (self.lm_head(self.model(input_ids)),)
'''


def write_snapshot(root: Path, name: str = "wombat-tiny", *, extra: str = "", tail: str = "",
                   config: dict | None = None) -> Path:
    """Write the snapshot into `root / name` and return that directory. `extra` / `tail`: Python lines placed at
    the top / the end of modeling_wombat.py (a test makes the file, or the forward, raise with them)."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(config if config is not None else CONFIG, indent=2))
    (d / "configuration_wombat.py").write_text(CONFIGURATION)
    (d / "modeling_wombat.py").write_text(MODELING.replace("{extra}", extra) + tail)
    return d
