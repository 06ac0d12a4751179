"""What a graph knows about where it came from and what the passes did to it.

`GraphMeta` replaces a free-form dict: every key an importer or a pass writes is a typed field.
Its JSON form (`to_json`) holds the fields that differ from their defaults, so a graph file states
what was recorded and nothing else; keys this version does not know (a file written by a newer
graphsim, or by hand) are kept in `extra` and written back unchanged.
"""

from __future__ import annotations

import copy
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from graphsim.ir.tensor import DTYPE_ALIASES, DType


@dataclass
class GraphMeta:
    # --- common to every importer
    source_format: str = ""  # "hf" | "onnx" | "test"
    model: str = ""  # catalog name, HF id or path the graph was imported from
    param_count: int | None = None  # the whole model's parameters (tied ones once), also of untraced layers
    opaque_ops: list[str] = field(default_factory=list)  # targets with no IR kind, sorted (reported, never dropped)
    # --- Hugging Face import (graphsim.importers.hf)
    architecture: str = ""  # config's architectures[0]
    config_source: str = ""
    config_location: str = ""
    dtype: str = ""  # torch dtype name without "torch." ("bfloat16")
    num_layers: int | None = None  # decoder layers of the model (the real depth)
    layer_stack: str = ""  # module path of the decoder-layer list ("model.layers")
    traced_layers: list[int] = field(default_factory=list)  # layer indices present in the graph
    params_per_layer: list[int] = field(default_factory=list)
    quantization_config: dict[str, Any] | None = None  # the checkpoint's quantization, read by graphsim.quantization
    tied_params: dict[str, str] = field(default_factory=dict)  # tied parameter → the one it shares storage with
    dynamic_tokens: bool = False  # traced with a symbolic token count (False: static trace read back as T)
    full_depth: bool = False  # every layer traced (the fold pass derives the schedule)
    layer_tags: list[str] = field(default_factory=list)  # per-layer type tags (a hint for fold on full-depth graphs)
    buffers: list[str] = field(default_factory=list)  # graph inputs that are module buffers, not activations
    # --- ONNX import (graphsim.importers.onnx_importer)
    source: str = ""  # the .onnx path
    ir_version: int | None = None
    opset: dict[str, int] = field(default_factory=dict)  # domain → version
    producer: str = ""
    onnx_graph_name: str = ""
    dim_symbols: dict[str, str] = field(default_factory=dict)  # ONNX dim name → graphsim expression
    shape_inference: str = ""  # "ok" or "failed: …"
    opaque_counts: dict[str, int] = field(default_factory=dict)
    unknown_shapes: list[str] = field(default_factory=list)
    unsupported_dtypes: list[str] = field(default_factory=list)
    # --- passes
    fuse_target: str = ""  # engine whose kernels the fuse pass made ("vllm", "eager")
    tp: int = 1  # tensor-parallel ranks the graph is one of
    ep: int = 1  # expert-parallel ranks
    moe_tp: int | None = None  # TP of the expert weights when EP splits them (1 under EP)
    compiled: bool = False  # the `inductor` pass ran: vLLM's compiled-mode kernels (partition passes run before it)
    # keys this version does not know, kept as read
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            default = f.default_factory() if f.default is MISSING and f.default_factory is not MISSING else f.default
            if value != default:
                out[f.name] = value
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GraphMeta:
        known = {f.name for f in fields(cls)} - {"extra"}
        meta = cls(**{k: v for k, v in data.items() if k in known})
        meta.extra = {k: v for k, v in data.items() if k not in known}
        return meta

    @property
    def model_dtype(self) -> DType | None:
        """The element type the model runs in when it is a serving dtype (fp32, bf16, fp16), else None."""
        d = DTYPE_ALIASES.get(self.dtype)
        return d if d in (DType.FLOAT32, DType.BFLOAT16, DType.FLOAT16) else None

    def copy(self) -> GraphMeta:
        """An independent copy (passes change their output graph's meta, never their input's)."""
        return copy.deepcopy(self)
