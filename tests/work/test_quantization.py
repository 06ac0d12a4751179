"""graphsim.quantization: the one quantization model (parsing every shipped real config, stored bytes by
hand, refusals) and its use by the accountant (stored bytes, KV dtype) and the catalog (hf_quant_config.json)."""

from __future__ import annotations

import json
import pathlib

import pytest

from graphsim.catalog import resolve_model
from graphsim.errors import ConfigError
from graphsim.quantization import (
    Granularity, WeightFormat, WeightScheme, matches, parse_quant_config, parse_quantization,
)
from graphsim.work import accounting


def _model_configs() -> pathlib.Path | None:
    try:
        import aiconfigurator_core
    except ImportError:
        return None
    return pathlib.Path(aiconfigurator_core.__file__).parent / "model_configs"


DIR = _model_configs()
FILES = sorted(p.name for p in DIR.glob("*.json")) if DIR is not None else []


def _expected(name: str) -> set[str] | None:
    """What each checkpoint's name (and its model card's family) says it ships, written from the file
    names, not from the parser: None = unquantized."""
    n = name.lower()
    if "gpt-oss" in n:
        return {"mxfp4"}
    if "kimi-k3_" in n:
        return {"mxfp4"}  # compressed-tensors mxfp4-pack-quantized
    if "kimi-k2.5_" in n:
        return {"int4"}  # compressed-tensors pack-quantized int4 g32
    if "minimax-m3-nvfp4" in n:
        return {"nvfp4", "mxfp8"}  # MIXED_PRECISION: NVFP4 experts, MXFP8 dense MLPs
    if ("qwen3.6-" in n and "nvfp4" in n) or "lightning" in n:
        return {"nvfp4", "fp8"}  # MIXED_PRECISION: FP8 linear attention, W4A16 NVFP4 MLPs
    if "nvfp4" in n:
        return {"nvfp4"}
    if "fp8" in n:
        return {"fp8"}
    if n.startswith("deepseek-ai--deepseek-v4"):
        return {"fp8", "mxfp4"}  # fp8 blocks, and `expert_dtype: fp4` experts (vLLM DeepseekV4FP8Config: MXFP4)
    if n.startswith(("minimaxai--minimax-m2", "deepseek-ai--", "xiaomimimo--mimo-v2", "moonshotai--kimi-k2-")):
        return {"fp8"}  # these upstream checkpoints ship fp8 block-scaled weights (their configs' quant_method)
    return None


@pytest.mark.skipif(DIR is None, reason="aiconfigurator-core is not installed")
@pytest.mark.parametrize("name", FILES)
def test_every_shipped_config_parses_to_the_scheme_its_name_says(name):
    assert DIR is not None
    raw = json.loads((DIR / name).read_text())
    q = parse_quant_config(raw, name) if name.endswith("_hf_quant_config.json") else parse_quantization(raw)
    want = _expected(name)
    if name.endswith("_hf_quant_config.json"):
        assert q is not None and q.method == "modelopt"
    if want is None:
        # a bf16 config: quantized only through an hf_quant_config.json beside it
        sibling = DIR / name.replace("_config.json", "_hf_quant_config.json")
        assert q is None or sibling.exists()
        return
    if q is None:  # the quantization lives in the hf_quant_config.json beside it
        sibling = DIR / name.replace("_config.json", "_hf_quant_config.json")
        q = parse_quant_config(json.loads(sibling.read_text()), sibling.name)
    assert {s.format.value for s in q.schemes()} == want


@pytest.mark.skipif(DIR is None, reason="aiconfigurator-core is not installed")
def test_hf_quant_config_beside_a_config_is_read_and_fp8_kv_follows():
    assert DIR is not None
    resolved = resolve_model(str(DIR / "nvidia--DeepSeek-V3.1-NVFP4_config.json"))
    q = parse_quantization(resolved.config)
    assert q is not None and q.method == "modelopt"
    assert q.default == WeightScheme(WeightFormat.NVFP4, Granularity.GROUP, group_size=16, act_bits=4)
    assert q.scheme_for("model.layers.5.self_attn.kv_b_proj") is None  # in its exclude_modules
    acc = accounting(resolved.config)
    assert (acc.precision.kv.label, acc.precision.kv_source) == ("fp8", "checkpoint")  # kv_cache_quant_algo: FP8
    given = accounting(resolved.config, kv_dtype="bf16").precision  # the user's choice wins
    assert (given.kv.label, given.kv_source) == ("bf16", "--kv-dtype")
    ignored = accounting(resolved.config, ignore_quant=True).precision  # --ignore-quant: no checkpoint KV either
    assert (ignored.kv.label, ignored.kv_source) == ("bf16", "parameter dtype")


def test_model_directory_hf_quant_config(tmp_path):
    cfg = resolve_model("llama-3.1-8b").config
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8",
                                                            "exclude_modules": ["lm_head"]}}))
    q = parse_quantization(resolve_model(str(tmp_path)).config)
    assert q is not None and q.default == WeightScheme(WeightFormat.FP8, Granularity.TENSOR, act_bits=8)
    assert q.kv_dtype == "fp8" and q.scheme_for("lm_head") is None
    assert q.scheme_for("model.layers.3.self_attn.q_proj") == q.default


def test_nvfp4_matrix_bytes_by_hand():
    # 256 × 1024 NVFP4 (modelopt ModelOptNvFp4LinearMethod.create_weights): 262,144 e2m1 values at 4 bits
    # = 131,072 B; one e4m3 scale per 16 inputs = 256 × 64 = 16,384 B; weight_scale_2 (fp32) 4 B;
    # input_scale (fp32) 4 B → 147,464 B
    s = WeightScheme(WeightFormat.NVFP4, Granularity.GROUP, group_size=16, act_bits=4)
    assert s.matrix_bytes(256, 1024) == 147_464
    assert s.kernel_dtype == "nvfp4"


def test_int4_g128_matrix_bytes_by_hand():
    # 256 × 1024 int4, group 128, symmetric (compressed-tensors pack-quantized): 131,072 B of packed values;
    # 1024 / 128 = 8 groups per row → 256 × 8 = 2,048 fp16 scales = 4,096 B → 135,168 B
    s = WeightScheme(WeightFormat.INT4, Granularity.GROUP, group_size=128)
    assert s.matrix_bytes(256, 1024) == 135_168
    # AWQ adds a 4-bit zero point per group and row: 2,048 × 0.5 = 1,024 B → 136,192 B
    awq = parse_quant_config({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}).default
    assert awq is not None and awq.matrix_bytes(256, 1024) == 136_192 and awq.kernel_dtype == "int4_wo"
    # GPTQ also stores g_idx (int32 per input row): + 4,096 B → 140,288 B
    gptq = parse_quant_config({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}).default
    assert gptq is not None and gptq.matrix_bytes(256, 1024) == 140_288


def test_int8_by_hand():
    # GPTQ 8-bit g128, 256 × 1024: 262,144 B of values; 8 groups × 256 rows = 2,048 fp16 scales = 4,096 B;
    # 8-bit zero points 2,048 B; g_idx 1024 × 4 = 4,096 B → 272,384 B; weight-only
    gptq8 = parse_quant_config({"quant_method": "gptq", "bits": 8, "group_size": 128}).default
    assert gptq8 is not None and gptq8.matrix_bytes(256, 1024) == 272_384 and gptq8.kernel_dtype == "int8_wo"
    # compressed-tensors W8A8 int8, channel: 300 × 200 = 60,000 B + 300 fp32 row scales 1,200 B = 61,200 B
    ct = {"quant_method": "compressed-tensors", "config_groups": {"g": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "int", "dynamic": True}}}}
    w8a8 = parse_quant_config(ct).default
    assert w8a8 is not None and w8a8.matrix_bytes(300, 200) == 61_200 and w8a8.kernel_dtype == "int8"
    with pytest.raises(ConfigError, match="8-bit weights is not supported"):
        parse_quant_config({"quant_method": "awq", "bits": 8})


def test_fp8_granularities_by_hand():
    # 300 × 200 e4m3 = 60,000 B, plus fp32 scales: per-tensor 1 (+ static input scale 1) = 8 B;
    # per-channel 300 = 1,200 B; 128×128 blocks ceil(300/128) · ceil(200/128) = 3 · 2 = 6 → 24 B
    ct = {"quant_method": "compressed-tensors", "config_groups": {"g": {
        "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
        "input_activations": {"num_bits": 8, "type": "float", "dynamic": True}}}}
    chan = parse_quant_config(ct).default
    assert chan is not None and chan.matrix_bytes(300, 200) == 61_200 and chan.kernel_dtype == "fp8"
    tensor = parse_quant_config({"quant_method": "modelopt", "quant_algo": "FP8"}).default
    assert tensor is not None and tensor.matrix_bytes(300, 200) == 60_008
    block = parse_quant_config({"quant_method": "fp8", "weight_block_size": [128, 128]}).default
    assert block is not None and block.matrix_bytes(300, 200) == 60_024 and block.kernel_dtype == "fp8_block"


def test_unknown_methods_are_one_line_errors():
    for raw, name in (({"quant_method": "bitsandbytes"}, "bitsandbytes"),
                      ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "W4A8_AWQ"),
                      ({"quant_method": "gptq", "bits": 3}, "3-bit")):
        with pytest.raises(ConfigError, match=name) as e:
            parse_quant_config(raw)
        assert "\n" not in str(e.value) and "--ignore-quant" in str(e.value)


def test_exclusion_patterns_follow_each_format():
    # modelopt `name*` covers the module and its children, not a sibling with a longer number
    assert matches("model.layers.0.mlp.down_proj", "model.layers.0*")
    assert not matches("model.layers.10.mlp.down_proj", "model.layers.1.*")
    # compressed-tensors regex and fp8's plain names (a dotted substring)
    assert matches("model.layers.4.self_attn.q_proj", r"re:.*self_attn.*")
    assert matches("model.layers.4.mlp.gate", "gate") and not matches("model.layers.4.mlp.gate_proj", "gate")
    # a multimodal wrapper's names match its language model's (vLLM's hf_to_vllm_mapper)
    assert matches("model.layers.0.linear_attn.out_proj", "model.language_model.layers.0.linear_attn*")
    assert matches("model.language_model.layers.2.mlp.down_proj", "model.layers.2.mlp")
    assert not matches("model.layers.1.mlp.down_proj", "model.language_model.layers.0.mlp*")


def test_work_stores_nvfp4_weights_and_excluded_modules_in_bf16():
    cfg = resolve_model("llama-3.1-8b").config
    quant = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
             "exclude_modules": ["lm_head", "model.layers.*.self_attn*"]}
    p = accounting(dict(cfg, quantization_config=quant)).params()
    # Llama-3.1-8B down_proj: 4096 × 14336 per layer, 32 layers; NVFP4: 4096·14336/2 + 4096·896 + 8
    down = 4096 * 14336 // 2 + 4096 * (14336 // 16) + 8
    mlp = p.segment("layers.ffn.mlp").stored_bytes
    gate_up = 2 * (14336 * 4096 // 2 + 14336 * (4096 // 16) + 8)
    assert mlp == 32 * (down + gate_up)
    # attention stays bf16: (4096 + 2·1024) × 4096 + 4096 × 4096 values at 2 bytes per layer
    attn = p.segment("layers.attn.qkv").stored_bytes + p.segment("layers.attn.out").stored_bytes
    assert attn == 32 * 2 * ((4096 + 2 * 1024) * 4096 + 4096 * 4096)


def test_roofline_weight_bytes_count_the_fixed_group_scales():
    import numpy as np

    from graphsim.costing.dtypes import KernelDtype
    from graphsim.costing.kernels import GemmKey
    from graphsim.costing.roofline import kernel_work

    # NVFP4 256 × 1024 at one token: activations 1024 × 0.5 = 512 B; weights 262,144 × (0.5 + 1/16) = 147,456 B
    # (the accountant's 147,464 B less its two fp32 per-tensor scalars); bf16 output 256 × 2 = 512 B → 148,480 B
    work = kernel_work(GemmKey(256, 1024, KernelDtype.NVFP4), np.array([[1.0]]))
    assert work is not None and float(work.bytes[0]) == 148_480.0
    # MXFP4 (w4a16): 1024 × 2 + 262,144 × (0.5 + 1/32) + 512 = 2,048 + 139,264 + 512 = 141,824 B
    work = kernel_work(GemmKey(256, 1024, KernelDtype.W4A16_MXFP4), np.array([[1.0]]))
    assert work is not None and float(work.bytes[0]) == 141_824.0


def test_without_quantization_drops_it_at_both_levels():
    from graphsim.quantization import without_quantization

    cfg = {"a": 1, "quantization_config": {"quant_method": "fp8"},
           "text_config": {"b": 2, "quantization_config": {"quant_method": "mxfp4"}}}
    assert without_quantization(cfg) == {"a": 1, "text_config": {"b": 2}}
    assert parse_quantization(without_quantization(cfg)) is None and "quantization_config" in cfg  # not mutated


def test_every_scheme_names_a_kernel_dtype_costing_knows():
    from graphsim.costing.dtypes import parse_kernel_dtype

    for fmt in WeightFormat:
        for gran in Granularity:
            for act in (4, 8, 16):
                name = WeightScheme(fmt, gran, (128, 128), 16, act).kernel_dtype
                assert parse_kernel_dtype(name).value == name


def test_fp4_weights_price_as_w4a16_where_the_gpu_has_no_fp4_path():
    from graphsim.costing.dtypes import KernelDtype
    from graphsim.costing.hardware import load_hardware
    from graphsim.costing.kernel_map import Dtypes
    from graphsim.ir.meta import GraphMeta

    meta = GraphMeta(quantization_config={"quant_method": "modelopt", "quant_algo": "NVFP4"})
    # H200 has no FP4 tensor cores: vLLM's Marlin W4A16 kernel (marlin_utils_fp4.py), priced on the int4_wo rows
    hopper = Dtypes.for_graph(meta, hardware=load_hardware("h200"))
    assert (hopper.of("nvfp4"), hopper.of("mxfp4")) == (KernelDtype.INT4_WO, KernelDtype.W4A16_MXFP4)
    blackwell = Dtypes.for_graph(meta, hardware=load_hardware("b200"))
    assert (blackwell.of("nvfp4"), blackwell.of("mxfp4")) == (KernelDtype.NVFP4, KernelDtype.MXFP4)
    assert Dtypes.for_graph(meta).of("nvfp4") is KernelDtype.NVFP4  # no hardware named: the scheme as stored


def test_modelopt_mixed_precision_per_expert_names_cover_the_fused_experts():
    """NVIDIA's MiniMax-M3-NVFP4 lists its routed experts one matrix at a time, under the checkpoint's names
    (`language_model.model.layers.3.block_sparse_moe.experts.0.w1`), while the traced model (transformers) has one
    fused `model.language_model.layers.3.mlp.experts` module: the checkpoint's names are renamed as transformers
    loads them (conversion_mapping "minimax_m3_vl": block_sparse_moe.experts → mlp.experts, index_q_proj →
    indexer.q_proj) and the fused experts take the scheme listed under them (vLLM's
    ModelOptMixedPrecisionConfig._resolve_quant_algo, prefix lookup for RoutedExperts)."""
    layers = {
        "language_model.model.layers.3.block_sparse_moe.experts.0.w1": {"quant_algo": "NVFP4", "group_size": 16},
        "language_model.model.layers.3.block_sparse_moe.experts.0.w2": {"quant_algo": "NVFP4", "group_size": 16},
        "language_model.model.layers.3.block_sparse_moe.shared_experts.gate_proj": {"quant_algo": "MXFP8"},
        "language_model.model.layers.3.self_attn.index_q_proj": {"quant_algo": "MXFP8"},
        "language_model.model.layers.3.self_attn.q_proj": {"quant_algo": "MXFP8"},
    }
    cfg = {"model_type": "minimax_m3_vl", "quantization_config": {
        "quant_method": "modelopt", "quant_algo": "MIXED_PRECISION", "quantized_layers": layers,
        "exclude_modules": ["language_model.model.layers.3.block_sparse_moe.gate"]}}
    q = parse_quantization(cfg)
    assert q is not None

    def fmt(path):
        s = q.scheme_for(path)
        return s.format if s is not None else None

    # the fused experts module and its fused tensors: NVFP4 (were unmatched: bf16)
    assert fmt("model.language_model.layers.3.mlp.experts") is WeightFormat.NVFP4
    assert fmt("model.language_model.layers.3.mlp.experts.gate_up_proj") is WeightFormat.NVFP4
    assert fmt("model.language_model.layers.3.mlp.shared_experts.gate_proj") is WeightFormat.MXFP8
    assert fmt("model.language_model.layers.3.self_attn.indexer.q_proj") is WeightFormat.MXFP8
    assert fmt("model.language_model.layers.3.self_attn.q_proj") is WeightFormat.MXFP8
    # the router stays excluded under its new name; a layer the config does not list stays unquantized
    assert fmt("model.language_model.layers.3.mlp.gate") is None
    assert fmt("model.language_model.layers.4.mlp.experts") is None
    # NVFP4 bytes of one fused gate_up matrix (768 × 6144 a rank at TP8): 0.5 B a weight + one e4m3 scale per 16
    # + fp32 weight_scale_2 and input_scale: 768·6144/2 + 768·384 + 4 + 4 = 2,359,296 + 294,912 + 8 = 2,654,216 B
    assert q.matrix_bytes_at("model.language_model.layers.3.mlp.experts.gate_up_proj", 768, 6144) == 2_654_216
