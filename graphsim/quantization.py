"""Checkpoint quantization, read once from a config: which weight matrices are stored how, and the KV dtype.

One typed model (`Quantization`) that the work accountant (stored bytes), the kv/memory budget (weight
bytes, KV dtype), the fuse pass (GEMM kernel dtypes) and costing (profile rows) all read. Torch-free.

Sources, by config shape (vLLM's loaders of each format, vllm/model_executor/layers/quantization/):

- `quant_method: fp8` (fp8.py:Fp8Config): e4m3 weights; `weight_block_size [bo, bi]` gives one fp32
  scale per bo×bi block (DeepSeek-V3), none gives one fp32 scale per matrix; `modules_to_not_convert`
  excluded. Activations are quantized to fp8 (dynamic or static per `activation_scheme`). An
  `expert_dtype` (DeepSeek-V4's checkpoints; transformers' DeepseekV4Config.__post_init__ moves a top-level
  one into the quantization config, and vLLM's DeepseekV4FP8Config reads it, "fp4" when a deepseek_v4 config
  states none: vllm/model_executor/models/deepseek_v4.py) stores the routed experts as MXFP4 ("fp4",
  Mxfp4MoEMethod) or as the fp8 blocks ("fp8").
- `quant_method: modelopt` (modelopt.py:ModelOptQuantConfigBase.from_config), or NVIDIA ModelOpt's
  `hf_quant_config.json` (`{"quantization": {"quant_algo", "kv_cache_quant_algo", "group_size",
  "exclude_modules"}}`, also accepted flat): `quant_algo` FP8 (per-tensor), FP8_PER_CHANNEL_PER_TOKEN,
  FP8_PB_WO (block, weight-only), NVFP4 (W4A4), W4A16_NVFP4, MIXED_PRECISION (`quantized_layers` maps
  modules to one of these; modules not listed stay unquantized). `exclude_modules` / `ignore` are fnmatch
  wildcards or module-name substrings (ModelOptQuantConfigBase.is_layer_excluded). A config without
  `quant_method` but with a `quant_algo` (as aiconfigurator-core ships them) is read as modelopt.
- `quant_method: compressed-tensors` (compressed_tensors/compressed_tensors.py): `config_groups`, each
  with `targets` (`Linear` = every linear layer, a module name, or `re:` regex) and `weights` /
  `input_activations` ({num_bits, type int|float, strategy tensor|channel|group|block, group_size,
  block_structure}); `ignore` lists excluded modules; `kv_cache_scheme` {num_bits 8, type float} = fp8 KV.
- `quant_method: awq` / `gptq` (awq.py, gptq.py): int4 (GPTQ also int8) weight-only with `group_size` (`q_group_size`
  in some AWQ configs; -1 = one group per row); `modules_to_not_convert` excluded (AWQ).
- `quant_method: mxfp4` (mxfp4.py, gpt-oss): e2m1 weights with one e8m0 scale per 32 inputs, 16-bit
  activations on Hopper (w4a16); `modules_to_not_convert` excluded.

Anything else raises a ConfigError naming the method and the fix (`--ignore-quant`): never bf16 silently.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from graphsim.errors import ConfigError

FP32_BYTES = 4  # fp32 scales: fp8.py Fp8LinearMethod.create_weights (weight_scale / weight_scale_inv float32)
FP8_BYTES = 1  # NVFP4 block scales are float8_e4m3fn: modelopt.py ModelOptNvFp4LinearMethod.create_weights
E8M0_BYTES = 1  # MX scales are 8-bit exponents: OCP MX spec v1.0 §5 (one E8M0 scale per 32-element block)
HALF_BYTES = 2  # AWQ / GPTQ / compressed-tensors int4 scales are in params_dtype (fp16/bf16): awq.py, gptq.py
NVFP4_GROUP = 16  # modelopt.py: hf_quant_config "group_size": 16 for NVFP4 (and NVIDIA's NVFP4 definition)
MX_GROUP = 32  # OCP MX spec v1.0: block size 32
INT32_BYTES = 4  # GPTQ's g_idx is int32 per input row: gptq.py GPTQLinearMethod.create_weights
FIX = "pass --ignore-quant to `graphsim work`, or remove quantization_config from the config, to price the weights in --dtype"


class WeightFormat(str, Enum):
    FP8 = "fp8"  # e4m3, 1 byte per element
    NVFP4 = "nvfp4"  # e2m1, 2 per byte, fp8 scale per 16 inputs, fp32 per-tensor scale
    MXFP4 = "mxfp4"  # e2m1, 2 per byte, e8m0 scale per 32 inputs
    MXFP8 = "mxfp8"  # e4m3, 1 byte, e8m0 scale per 32 inputs (modelopt.py: MXFP8_BLOCK_SIZE, MXFP8_SCALE_DTYPE)
    INT4 = "int4"  # packed int4, 16-bit scale (+ 4-bit zero point) per group of inputs
    INT8 = "int8"  # int8: fp32 scale per row / tensor (W8A8), or 16-bit scale (+ 8-bit zero point) per group


class Granularity(str, Enum):
    TENSOR = "tensor"
    CHANNEL = "channel"
    BLOCK = "block"
    GROUP = "group"


@dataclass(frozen=True)
class WeightScheme:
    """How one quantized matrix is stored and which activations its GEMM takes."""

    format: WeightFormat
    granularity: Granularity
    block: tuple[int, int] | None = None  # BLOCK: (out rows, in cols) per scale
    group_size: int | None = None  # GROUP: inputs per scale
    act_bits: int = 16  # 16 = weight-only (activations stay in the model dtype); 8 = fp8; 4 = fp4
    zero_point: bool = False  # asymmetric int4 stores a 4-bit zero point per group (AWQ, GPTQ)
    g_idx: bool = False  # GPTQ stores an int32 group index per input row

    def describe(self) -> str:
        text = self.format.value
        if self.block:
            text += f" block {self.block[0]}x{self.block[1]}"
        elif self.granularity is Granularity.GROUP:
            text += f" g{self.group_size}"
        else:
            text += f" per-{self.granularity.value}"
        return text + (" w-only" if self.act_bits == 16 else f" a{self.act_bits}")

    @property
    def kernel_dtype(self) -> str:
        """The kernel mode (costing.dtypes.KernelDtype value) of a GEMM on this matrix."""
        f = self.format
        if f is WeightFormat.FP8:
            if self.act_bits == 16:
                return "fp8_wo"
            return "fp8_block" if self.granularity is Granularity.BLOCK else "fp8"
        if f is WeightFormat.MXFP8:
            return "fp8"  # 1-byte weights and activations at the fp8 peak: the nearest kernel mode with tables
        if f is WeightFormat.MXFP4:
            return {16: "w4a16_mxfp4", 8: "w4a8_mxfp4_mxfp8"}.get(self.act_bits, "mxfp4")
        if f is WeightFormat.NVFP4 and self.act_bits == 4:
            return "nvfp4"
        if f is WeightFormat.INT8:
            return "int8" if self.act_bits == 8 else "int8_wo"
        # int4 and W4A16 NVFP4: 4-bit weights dequantized to 16-bit in the kernel (vLLM runs both on Marlin:
        # modelopt.py imports MarlinNvFp4LinearKernel; gptq_marlin.py / awq_marlin.py for int4)
        return "int4_wo"

    def matrix_bytes(self, out_features: int, in_features: int) -> float:
        """Stored bytes of one (out × in) matrix in this scheme, scales included."""
        elements = out_features * in_features
        f, g = self.format, self.granularity
        if f is WeightFormat.FP8:
            if g is Granularity.BLOCK and self.block:
                bo, bi = self.block
                scales = math.ceil(out_features / bo) * math.ceil(in_features / bi)
            elif g is Granularity.CHANNEL:
                scales = out_features  # ChannelQuantScaleParameter: one fp32 per output row
            else:
                scales = 1
            static_input = FP32_BYTES if self.act_bits == 8 and g is Granularity.TENSOR else 0
            return elements * FP8_BYTES + scales * FP32_BYTES + static_input
        if f is WeightFormat.NVFP4:
            group = self.group_size or NVFP4_GROUP
            # weight uint8 [out, in/2]; weight_scale e4m3 [out, in/group]; weight_scale_2 fp32; input_scale fp32
            input_scale = FP32_BYTES if self.act_bits == 4 else 0
            return elements * 0.5 + out_features * math.ceil(in_features / group) * FP8_BYTES + FP32_BYTES + input_scale
        if f is WeightFormat.MXFP8:
            return elements * FP8_BYTES + out_features * math.ceil(in_features / MX_GROUP) * E8M0_BYTES
        if f is WeightFormat.MXFP4:
            return elements * 0.5 + out_features * math.ceil(in_features / (self.group_size or MX_GROUP)) * E8M0_BYTES
        value_bytes = 1.0 if f is WeightFormat.INT8 else 0.5
        if f is WeightFormat.INT8 and self.act_bits == 8 and g is not Granularity.GROUP:
            # compressed-tensors W8A8 int8: fp32 weight_scale per row (channel) or per tensor
            # (compressed_tensors/schemes/compressed_tensors_w8a8_int8.py create_weights)
            return elements * value_bytes + (out_features if g is Granularity.CHANNEL else 1) * FP32_BYTES
        groups = math.ceil(in_features / self.group_size) if self.group_size else 1
        scale_bytes = out_features * groups * HALF_BYTES
        zeros = out_features * groups * value_bytes if self.zero_point else 0  # zero points packed at the weight width
        g_idx = in_features * INT32_BYTES if self.g_idx else 0
        return elements * value_bytes + scale_bytes + zeros + g_idx


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's quantization: per-module weight schemes, excluded modules, and the KV dtype."""

    method: str  # the config's method: fp8, modelopt, compressed-tensors, awq, gptq, mxfp4
    default: WeightScheme | None  # scheme of every quantizable matrix not excluded nor listed below
    layers: tuple[tuple[tuple[str, ...], WeightScheme | None], ...] = ()  # (module patterns, scheme), first wins
    excluded: tuple[str, ...] = ()
    kv_dtype: str | None = None  # "fp8" when the checkpoint ships an fp8 KV cache
    source: str = "quantization_config"

    def describe(self) -> str:
        schemes = sorted({s.describe() for s in self.schemes()})
        text = f"{self.method}: {', '.join(schemes) or 'none'}"
        if self.excluded:
            text += f" ({len(self.excluded)} module patterns kept unquantized)"
        return text

    def schemes(self) -> tuple[WeightScheme, ...]:
        found = [s for _, s in self.layers if s is not None]
        if self.default is not None:
            found.append(self.default)
        return tuple(dict.fromkeys(found))

    def scheme_for(self, module_path: str) -> WeightScheme | None:
        """The scheme of the matrix at `module_path` (None: stored unquantized)."""
        if any(matches(module_path, p) for p in self.excluded):
            return None
        for patterns, scheme in self.layers:
            if any(p == "Linear" or matches(module_path, p) for p in patterns):
                return scheme
        experts = _fused_experts(module_path)
        if experts is not None:
            # routed experts listed one expert matrix at a time (ModelOpt MIXED_PRECISION `…experts.0.w1`): the
            # fused experts take the scheme of a module listed under them, as vLLM's
            # ModelOptMixedPrecisionConfig._resolve_quant_algo ("3. Prefix-based lookup (for RoutedExperts)")
            for patterns, scheme in self.layers:
                if any(_under(p, experts) for p in patterns):
                    return scheme
        return self.default

    def covers(self, module_path: str) -> bool:
        return self.scheme_for(module_path) is not None

    def matrix_bytes_at(self, module_path: str, out_features: int, in_features: int) -> float | None:
        scheme = self.scheme_for(module_path)
        return None if scheme is None else scheme.matrix_bytes(out_features, in_features)


_WRAPPER_PREFIXES = (("model.language_model.", "model."), ("language_model.model.", "model."), ("language_model.", ""))


def _unwrapped(name: str) -> str:
    """A multimodal wrapper's module name as its language model's (`model.language_model.layers.3` →
    `model.layers.3`): vLLM maps checkpoint names onto its own the same way (hf_to_vllm_mapper; modelopt.py
    is_layer_excluded also tries the name without `language_model.`)."""
    for old, new in _WRAPPER_PREFIXES:
        if name.startswith(old):
            return new + name[len(old):]
    return name


def _fused_experts(path: str) -> str | None:
    """The fused routed-experts module `path` is (`…mlp.experts`) or is a tensor of (`…experts.gate_up_proj`)."""
    if path.endswith(".experts"):
        return path
    parent = path.rsplit(".", 1)[0]
    return parent if parent.endswith(".experts") else None


def _under(pattern: str, module: str) -> bool:
    """Does a plain module name (no regex, no glob) name a module inside `module` (wrapper prefixes aside)?"""
    if pattern.startswith("re:") or any(ch in pattern for ch in "*?["):
        return False
    return pattern.startswith(module + ".") or _unwrapped(pattern).startswith(_unwrapped(module) + ".")


def matches(path: str, pattern: str) -> bool:
    """Does a module-name pattern cover `path` (the module or a submodule)? `re:` prefix = regex
    (compressed-tensors), glob characters = fnmatch (modelopt; `name*` also as `name` / `name.*`, as
    ModelOptQuantConfigBase.apply_vllm_mapper splits it), otherwise a dotted substring (fp8.py /
    modelopt.py treat a listed name as a substring of the prefix). Names inside a multimodal wrapper match
    their language model's names too."""
    if _matches(path, pattern):
        return True
    upath, upattern = _unwrapped(path), pattern if pattern.startswith("re:") else _unwrapped(pattern)
    return (upath, upattern) != (path, pattern) and _matches(upath, upattern)


def _matches(path: str, pattern: str) -> bool:
    if pattern.startswith("re:"):
        return re.match(pattern[3:], path) is not None
    if any(ch in pattern for ch in "*?["):
        if pattern.endswith("*") and not pattern.endswith(".*") and "*" not in pattern[:-1]:
            stem = pattern[:-1]
            return f".{stem}." in f".{path}." or fnmatch.fnmatchcase(path, f"*{stem}.*")
        return fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern + ".*") \
            or fnmatch.fnmatchcase(path, "*." + pattern) or fnmatch.fnmatchcase(path, "*." + pattern + ".*")
    return f".{pattern}." in f".{path}."


# --- parsing ---------------------------------------------------------------------------------
def _names(raw: Any, key: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError(f"quantization_config.{key} is not a list of module names; fix it")
    return tuple(str(m) for m in raw)


def _positive_int(value: Any, where: str) -> int | None:
    if value is None or value == -1:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where} {value!r} is not a positive integer (or -1); fix it")
    return value


def _fp8(raw: Mapping[str, Any]) -> Quantization:
    block = raw.get("weight_block_size")
    if block is not None:
        if (not isinstance(block, (list, tuple)) or len(block) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise ConfigError(f"quantization_config.weight_block_size {block!r} is not two positive integers; fix it")
        scheme = WeightScheme(WeightFormat.FP8, Granularity.BLOCK, (block[0], block[1]), act_bits=8)
    else:
        scheme = WeightScheme(WeightFormat.FP8, Granularity.TENSOR, act_bits=8)
    experts = raw.get("expert_dtype")
    if experts not in (None, "fp4", "fp8"):
        raise ConfigError(f"quantization_config.expert_dtype {experts!r} is not fp4 or fp8 (vLLM's DeepSeek-V4 "
                          "loader takes only those); fix it")
    layers: tuple[tuple[tuple[str, ...], WeightScheme | None], ...] = ()
    if experts == "fp4":  # deepseek_v4.py DeepseekV4FP8Config.get_quant_method: Mxfp4MoEMethod for FusedMoE
        layers = ((("experts",), WeightScheme(WeightFormat.MXFP4, Granularity.GROUP, group_size=MX_GROUP,
                                              act_bits=16)),)
    return Quantization("fp8", scheme, layers=layers,
                        excluded=_names(raw.get("modules_to_not_convert"), "modules_to_not_convert"),
                        kv_dtype=_kv(raw))


def _modelopt_algo(algo: Any, group_size: int | None, where: str) -> WeightScheme | None:
    a = str(algo or "").upper()
    if a == "FP8":
        return WeightScheme(WeightFormat.FP8, Granularity.TENSOR, act_bits=8)
    if a == "FP8_PER_CHANNEL_PER_TOKEN":
        return WeightScheme(WeightFormat.FP8, Granularity.CHANNEL, act_bits=8)
    if a == "FP8_PB_WO":  # modelopt.py ModelOptFp8PbWoLinearMethod: 128x128 block scales, weight-only
        return WeightScheme(WeightFormat.FP8, Granularity.BLOCK, (128, 128), act_bits=16)
    if a == "MXFP8":
        return WeightScheme(WeightFormat.MXFP8, Granularity.GROUP, group_size=MX_GROUP, act_bits=8)
    if a == "NVFP4":
        return WeightScheme(WeightFormat.NVFP4, Granularity.GROUP, group_size=group_size or NVFP4_GROUP, act_bits=4)
    if a == "W4A16_NVFP4":
        return WeightScheme(WeightFormat.NVFP4, Granularity.GROUP, group_size=group_size or NVFP4_GROUP, act_bits=16)
    if a in ("", "NONE"):
        return None
    raise ConfigError(f"{where} quant_algo '{algo}' is not supported (supported: FP8, FP8_PER_CHANNEL_PER_TOKEN, "
                      f"FP8_PB_WO, MXFP8, NVFP4, W4A16_NVFP4, MIXED_PRECISION); {FIX}")


def _kv(raw: Mapping[str, Any]) -> str | None:
    algo = raw.get("kv_cache_quant_algo")
    scheme = raw.get("kv_cache_scheme")
    if isinstance(scheme, Mapping):
        if scheme.get("type") == "float" and scheme.get("num_bits") == 8:
            return "fp8"
        raise ConfigError(f"quantization_config.kv_cache_scheme {dict(scheme)!r} is not an fp8 cache, the only "
                          "quantized KV cache graphsim prices; pass --kv-cache-dtype")
    if algo is None and isinstance(scheme, str):
        algo = scheme  # aiconfigurator-core's flattened modelopt configs write "kv_cache_scheme": "FP8"
    if algo is None:
        return None
    if str(algo).upper() == "FP8":
        return "fp8"
    raise ConfigError(f"kv_cache_quant_algo '{algo}' is not supported (graphsim prices fp8 KV caches); "
                      "pass --kv-cache-dtype")


def _modelopt(raw: Mapping[str, Any], source: str) -> Quantization:
    inner = raw.get("quantization") if isinstance(raw.get("quantization"), Mapping) else raw
    assert isinstance(inner, Mapping)
    group = _positive_int(inner.get("group_size"), "quantization group_size")
    algo = str(inner.get("quant_algo") or "").upper()
    excluded = _names(inner.get("exclude_modules", inner.get("ignore")), "exclude_modules")
    kv = _kv(inner)
    if algo == "MIXED_PRECISION":
        layers = inner.get("quantized_layers")
        if not isinstance(layers, Mapping):
            raise ConfigError("MIXED_PRECISION quantization has no quantized_layers object; fix the config")
        per: list[tuple[tuple[str, ...], WeightScheme | None]] = []
        for name, spec in layers.items():
            if not isinstance(spec, Mapping):
                raise ConfigError(f"quantized_layers['{name}'] is not an object; fix the config")
            gs = _positive_int(spec.get("group_size"), f"quantized_layers['{name}'].group_size") or group
            per.append(((str(name),), _modelopt_algo(spec.get("quant_algo"), gs, f"quantized_layers['{name}']")))
        return Quantization("modelopt", None, tuple(per), excluded, kv, source)
    if not algo:
        raise ConfigError(f"modelopt quantization in {source} has no quant_algo; fix the config or {FIX}")
    return Quantization("modelopt", _modelopt_algo(algo, group, "modelopt"), (), excluded, kv, source)


def _ct_scheme(group: Mapping[str, Any], name: str) -> WeightScheme:
    w = group.get("weights")
    if not isinstance(w, Mapping):
        raise ConfigError(f"compressed-tensors config_groups['{name}'] has no weights object; fix the config")
    bits, kind = w.get("num_bits"), str(w.get("type") or "int")
    strategy = str(w.get("strategy") or "").lower()
    a = group.get("input_activations")
    act_bits = int(a.get("num_bits", 16)) if isinstance(a, Mapping) else 16
    gs = _positive_int(w.get("group_size"), f"config_groups['{name}'].weights.group_size")
    if bits == 8 and kind == "float":
        if strategy == "block" or w.get("block_structure"):
            b = w.get("block_structure") or [128, 128]
            return WeightScheme(WeightFormat.FP8, Granularity.BLOCK, (int(b[0]), int(b[1])), act_bits=act_bits)
        gran = Granularity.CHANNEL if strategy == "channel" else Granularity.TENSOR
        return WeightScheme(WeightFormat.FP8, gran, act_bits=act_bits)
    if bits == 4 and kind == "float":
        fmt = WeightFormat.MXFP4 if gs == MX_GROUP else WeightFormat.NVFP4
        return WeightScheme(fmt, Granularity.GROUP, group_size=gs or NVFP4_GROUP, act_bits=act_bits)
    if bits == 4 and kind == "int" and act_bits == 16:
        asym = w.get("symmetric") is False
        gran = Granularity.GROUP if gs else Granularity.CHANNEL
        return WeightScheme(WeightFormat.INT4, gran, group_size=gs, act_bits=16, zero_point=asym)
    if bits == 8 and kind == "int" and act_bits in (8, 16):
        gran = Granularity.GROUP if gs else Granularity.TENSOR if strategy == "tensor" else Granularity.CHANNEL
        return WeightScheme(WeightFormat.INT8, gran, group_size=gs, act_bits=act_bits)
    raise ConfigError(f"compressed-tensors scheme {bits}-bit {kind} weights with {act_bits}-bit activations "
                      f"(config_groups['{name}']) is not supported (supported: fp8, nvfp4, mxfp4, int4 weight-only, "
                      f"int8); {FIX}")


def _compressed_tensors(raw: Mapping[str, Any]) -> Quantization:
    groups = raw.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ConfigError("compressed-tensors quantization_config has no config_groups; fix the config")
    per: list[tuple[tuple[str, ...], WeightScheme | None]] = []
    for name, g in groups.items():
        if not isinstance(g, Mapping):
            raise ConfigError(f"config_groups['{name}'] is not an object; fix the config")
        targets = g.get("targets") or ["Linear"]
        per.append((tuple(str(t) for t in targets), _ct_scheme(g, str(name))))
    # a group targeting every Linear is the default; explicit module targets come first
    per.sort(key=lambda item: "Linear" in item[0])
    default = next((s for t, s in per if "Linear" in t), None)
    layers = tuple((t, s) for t, s in per if "Linear" not in t)
    return Quantization("compressed-tensors", default, layers, _names(raw.get("ignore"), "ignore"), _kv(raw))


def _int4(raw: Mapping[str, Any], method: str) -> Quantization:
    bits = raw.get("bits", raw.get("w_bit", 4))
    allowed = (4,) if method == "awq" else (4, 8)  # awq.py: 4-bit only; gptq.py also packs 8-bit
    if bits not in allowed:
        raise ConfigError(f"{method} with {bits}-bit weights is not supported (graphsim prices "
                          f"{' and '.join(map(str, allowed))}-bit); {FIX}")
    gs = _positive_int(raw.get("group_size", raw.get("q_group_size", 128)), f"{method} group_size")
    zero = raw.get("zero_point", True) if method == "awq" else not raw.get("sym", True)
    # AutoGPTQ checkpoints store qzeros even when symmetric (gptq.py creates qzeros unconditionally)
    fmt = WeightFormat.INT4 if bits == 4 else WeightFormat.INT8
    scheme = WeightScheme(fmt, Granularity.GROUP if gs else Granularity.CHANNEL, group_size=gs,
                          act_bits=16, zero_point=bool(zero) or method == "gptq", g_idx=method == "gptq")
    return Quantization(method, scheme, excluded=_names(raw.get("modules_to_not_convert"), "modules_to_not_convert"))


def parse_quant_config(raw: Any, source: str = "quantization_config") -> Quantization:
    """Parse a `quantization_config` object (or a modelopt hf_quant_config.json's content)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source} is not a JSON object; fix or remove it")
    method = str(raw.get("quant_method") or "").lower()
    inner = raw.get("quantization")
    algo = raw.get("quant_algo") or (inner.get("quant_algo") if isinstance(inner, Mapping) else None)
    if method.startswith("modelopt") or (algo and method in ("", "fp8")):
        return _modelopt(raw, source)
    if method == "fp8":
        return _fp8(raw)
    if method == "compressed-tensors":
        return _compressed_tensors(raw)
    if method in ("awq", "gptq"):
        return _int4(raw, method)
    if method == "mxfp4":
        scheme = WeightScheme(WeightFormat.MXFP4, Granularity.GROUP, group_size=MX_GROUP, act_bits=16)
        return Quantization("mxfp4", scheme, excluded=_names(raw.get("modules_to_not_convert"), "modules_to_not_convert"))
    raise ConfigError(f"{source}.quant_method '{method or '(none)'}' is not supported (supported: fp8, modelopt, "
                      f"compressed-tensors, awq, gptq, mxfp4); {FIX}")


# Checkpoints that name modules their own way: the mid-key renames transformers applies when it loads them
# (transformers conversion_mapping.py, per model_type). A quantization config names the checkpoint's modules, so
# its patterns are renamed the same way before they are matched against the model's (transformers') module names.
CHECKPOINT_RENAMES: dict[str, tuple[tuple[str, str], ...]] = {
    # "deepseek_v4": WeightRenaming(r"\.attn\.", ".self_attn."), (r"\.ffn\.", ".mlp."),
    # (r"\.indexer\.compressor\.", ".compressor.indexer."); the NVFP4 checkpoints list "layers.0.ffn.experts"
    # and ignore "*.attn.*", "*.ffn.shared_experts.*"
    "deepseek_v4": ((".attn.", ".self_attn."), (".ffn.", ".mlp."), (".indexer.compressor.", ".compressor.indexer.")),
    # "minimax_m3_vl": WeightRenaming(r"\.block_sparse_moe\.(experts|gate|shared_experts)\.", r"\.mlp\.\1\."),
    # (r"\.self_attn\.index_q_proj\.", ".self_attn.indexer.q_proj.") and index_k_proj: NVIDIA's MiniMax-M3-NVFP4
    # lists "language_model.model.layers.3.block_sparse_moe.experts.0.w1" and "….self_attn.index_q_proj"
    "minimax_m3_vl": ((".block_sparse_moe.experts.", ".mlp.experts."), (".block_sparse_moe.gate.", ".mlp.gate."),
                      (".block_sparse_moe.shared_experts.", ".mlp.shared_experts."),
                      (".self_attn.index_q_proj.", ".self_attn.indexer.q_proj."),
                      (".self_attn.index_k_proj.", ".self_attn.indexer.k_proj.")),
}
_PATTERN_LISTS = ("ignore", "exclude_modules", "modules_to_not_convert")


def _rename(pattern: str, renames: tuple[tuple[str, str], ...]) -> str:
    # the checkpoint's names are relative to the model ("layers.0.ffn.experts"): a leading name is mid-key too,
    # and so is a trailing one (a listed module's tensors follow it: "….index_q_proj" names "….index_q_proj.weight")
    padded = "." + pattern + "."
    for old, new in renames:
        padded = padded.replace(old, new)
    return padded[1:-1]


def _renamed(raw: Mapping[str, Any], renames: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """`raw` with its module patterns (`quantized_layers` keys, ignore / exclude lists, also under `quantization`)
    renamed into the model's module names."""
    def fix(d: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(d)
        for key in _PATTERN_LISTS:
            if isinstance(out.get(key), list):
                out[key] = [_rename(p, renames) if isinstance(p, str) else p for p in out[key]]
        if isinstance(out.get("quantized_layers"), Mapping):
            out["quantized_layers"] = {_rename(k, renames): v for k, v in out["quantized_layers"].items()}
        return out

    fixed = fix(raw)
    if isinstance(fixed.get("quantization"), Mapping):
        fixed["quantization"] = fix(fixed["quantization"])
    return fixed


def raw_quantization_config(cfg: Mapping[str, Any]) -> Any:
    """A config dict's `quantization_config`, or its text_config's for multimodal configs that state it there."""
    raw = cfg.get("quantization_config")
    text = cfg.get("text_config")
    if raw is None and isinstance(text, Mapping):
        raw = text.get("quantization_config")
    renames = CHECKPOINT_RENAMES.get(str(cfg.get("model_type", "")))
    if isinstance(raw, Mapping) and renames:
        raw = _renamed(raw, renames)
    if isinstance(raw, Mapping) and "expert_dtype" not in raw and str(raw.get("quant_method", "")).lower() == "fp8":
        # DeepSeek-V4: a top-level expert_dtype belongs to the quantization (DeepseekV4Config.__post_init__);
        # vLLM's DeepseekV4FP8Config takes "fp4" when a deepseek_v4 config states none
        experts = cfg.get("expert_dtype", "fp4" if cfg.get("model_type") == "deepseek_v4" else None)
        if experts is not None:
            raw = {**raw, "expert_dtype": experts}
    return raw


def parse_quantization(cfg: Mapping[str, Any]) -> Quantization | None:
    """The quantization of a config dict (`raw_quantization_config`); None when unquantized."""
    raw = raw_quantization_config(cfg)
    return None if raw is None else parse_quant_config(raw)


def without_quantization(cfg: dict[str, Any]) -> dict[str, Any]:
    """The config with its quantization_config (and its text_config's) removed: `--ignore-quant`."""
    out = {k: v for k, v in cfg.items() if k != "quantization_config"}
    text = out.get("text_config")
    if isinstance(text, dict) and "quantization_config" in text:
        out["text_config"] = {k: v for k, v in text.items() if k != "quantization_config"}
    return out


def merge_hf_quant_config(cfg: dict[str, Any], hf_quant: Mapping[str, Any]) -> dict[str, Any]:
    """A config with a model directory's hf_quant_config.json as its quantization_config, when the config
    states none (vLLM reads it the same way: model_loader/weight_utils.py get_quant_config looks for the
    method's config file, `hf_quant_config.json` for modelopt, when config.json has no quantization_config)."""
    if cfg.get("quantization_config") is not None:
        return cfg
    return {**cfg, "quantization_config": {"quant_method": "modelopt", **hf_quant}}
