"""The MoE routing model: its spellings, a corpus's load ratio, and the rows and tokens each model prices with
(torch-free: the graph is built by hand; every expected time is derived by hand from the rows written here)."""

import json

import pytest

from graphsim.costing.cost_model import CostModel
from graphsim.costing.dtypes import KernelDtype as D
from graphsim.costing.kernels import Measurement, MoeKey, MoeRouting, TokensPoint
from graphsim.costing.moe_routing import DEFAULT, MoeRoutingError, load_corpus, parse_routing
from graphsim.costing.profile_db import ProfileDB, ProfileMeta
from graphsim.ir import DType, Graph, LayerSchedule, Node, Op, T, TensorSpec
from graphsim.ir.geometry import GemmGeometry, MoeExpertsGeometry
from graphsim.ir.kernel import KernelAttrs, KernelKind
from graphsim.workload import SeqGroup, Step

GEO = MoeExpertsGeometry(hidden_size=64, inter_size=32, top_k=2, num_experts=4, tp=1, ep=1, activation="silu",
                         gated=True)


def key(routing: MoeRouting) -> MoeKey:
    return MoeKey(64, 32, 2, 4, 1, 1, D.BF16, routing)


def _graph() -> Graph:
    x = TensorSpec((1, T, 64), DType.BFLOAT16)
    g = Graph("toy-moe", inputs={"h": x})
    g.nodes = [Node("L0.moe", Op.KERNEL, ("h",), (x,), KernelAttrs(KernelKind.MOE_EXPERTS, "fused_moe", GEO, "bf16"),
                    layer=0)]
    g.outputs = ["L0.moe"]
    g.schedule = LayerSchedule(("a",), {"a": 0})
    return g


@pytest.fixture()
def profile(tmp_path):
    with ProfileDB.create(tmp_path / "moe.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([
            (key(MoeRouting.BALANCED), TokensPoint(8), Measurement(10.0)),
            (key(MoeRouting.BALANCED), TokensPoint(16), Measurement(20.0)),
            (key(MoeRouting.POWER_LAW_1_2), TokensPoint(8), Measurement(13.0)),
            (key(MoeRouting.POWER_LAW_1_2), TokensPoint(16), Measurement(26.0)),
        ])
    return ProfileDB.open(tmp_path / "moe.db")


def _time(cm: CostModel, tokens: int) -> float:
    ev = cm.evaluate([Step((SeqGroup(tokens, 0, 1),))])
    return float(ev.leaf_time_us[0, 0])


def test_spellings():
    assert parse_routing(None) == DEFAULT and DEFAULT.table is MoeRouting.POWER_LAW_1_2
    assert parse_routing("balanced").table is MoeRouting.BALANCED
    assert parse_routing("power-law").table is MoeRouting.POWER_LAW_1_2
    assert parse_routing("power-law:1.01").table is MoeRouting.POWER_LAW_1_01
    assert parse_routing("power-law:1.01").spec == "power-law:1.01"
    with pytest.raises(MoeRoutingError, match=r"power-law rows at α = 1.01, 1.2 only"):
        parse_routing("power-law:1.5")
    with pytest.raises(MoeRoutingError, match="use balanced, power-law"):
        parse_routing("zipf")


def test_corpus_ratio_is_the_mean_max_over_mean_load(tmp_path):
    # step 1: layer [4, 0, 0, 4] has mean 2, max 4 → 2; layer [2, 2, 2, 2] → 1. step 2: [6, 2, 0, 0]: mean 2,
    # max 6 → 3; a layer with no tokens is skipped. Mean over the three layer-steps (2 + 1 + 3) / 3 = 2.
    f = tmp_path / "c.json"
    f.write_text(json.dumps([{"layers": [[4, 0, 0, 4], [2, 2, 2, 2]]}, {"layers": [[6, 2, 0, 0], [0, 0, 0, 0]]}]))
    m = parse_routing(f"corpus:{f}")
    assert m.mean_ratio == pytest.approx(2.0) and m.samples == 3 and m.table is MoeRouting.BALANCED
    assert [r for r, _ in m.loads] == pytest.approx([1.0, 2.0, 3.0])  # each layer-step its own bin
    assert [w for _, w in m.loads] == pytest.approx([1 / 3] * 3)
    one = tmp_path / "one.json"
    one.write_text(json.dumps({"layers": [[4, 0, 0, 4], [2, 2, 2, 2]]}))
    assert load_corpus(str(one)).mean_ratio == pytest.approx(1.5)
    # more layer-steps than bins: 32 ratios 1, 2, …, 32 in 16 equal-count bins of two, at their means 1.5, 3.5, …
    many = tmp_path / "many.json"
    # 32 experts, 32 tokens a layer: one expert with r, r - 1 idle, the rest 1 each → max/mean = r / 1
    many.write_text(json.dumps({"layers": [[r] + [1] * (32 - r) + [0] * (r - 1) for r in range(1, 33)]}))
    loads = load_corpus(str(many)).loads
    assert len(loads) == 16 and loads[0] == pytest.approx((1.5, 1 / 16)) and loads[-1] == pytest.approx((31.5, 1 / 16))


@pytest.mark.parametrize("doc, fragment", [
    ({"layers": [[1, -2]]}, "greater than or equal to 0"),
    ({"layers": []}, "at least 1 item"),
    ({"layers": [[1, 2]], "extra": 1}, "unknown field"),
    ({"layers": [[1, 2], [1, 2, 3]]}, "every layer must list"),
    ({"layers": [[0, 0]]}, "zero tokens"),
])
def test_bad_corpus_is_one_line(tmp_path, doc, fragment):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(MoeRoutingError, match=fragment) as e:
        parse_routing(f"corpus:{f}")
    assert "\n" not in str(e.value)


def test_each_model_prices_its_rows(profile, tmp_path):
    g = _graph()
    balanced = CostModel.of_kernel_graph(g, None, profile, routing=parse_routing("balanced"))
    assert _time(balanced, 8) == pytest.approx(10.0)  # the balanced row at 8 tokens
    power = CostModel.of_kernel_graph(g, None, profile)  # the default: power-law α = 1.2
    assert _time(power, 8) == pytest.approx(13.0) and power.moe_routing.startswith("power-law α=1.2")
    # a corpus of two layers with max/mean loads 2 and 1 prices 8 tokens as the mean of the balanced rows at
    # ⌈2 × 8⌉ = 16 tokens (20 µs) and ⌈1 × 8⌉ = 8 tokens (10 µs): 15 µs
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"layers": [[4, 0, 0, 4], [2, 2, 2, 2]]}))
    corpus = CostModel.of_kernel_graph(g, None, profile, routing=parse_routing(f"corpus:{f}"))
    assert _time(corpus, 8) == pytest.approx(15.0) and "max/mean expert load 1.500 on average" in corpus.moe_routing
    # 6 tokens: the 8-token row (ratio 1 → 6 tokens, extrapolated flat below the first row with slope
    # min(1, 1) in log-log: 10 × 6/8 = 7.5 µs) and ⌈2 × 6⌉ = 12 tokens (log-log between (8, 10) and (16, 20):
    # 15 µs), averaged: (7.5 + 15) / 2 = 11.25 µs
    assert _time(corpus, 6) == pytest.approx(11.25)


def test_a_corpus_averages_per_layer_times_not_the_ratio(tmp_path):
    # rows (8, 10 µs) and (16, 40 µs): log-log slope 2 inside the range. Layers at ratios 1 and 2 at 8 tokens:
    # (t(8) + t(16)) / 2 = (10 + 40) / 2 = 25 µs; the time at the mean ratio 1.5 would be t(12) = 10 × 1.5² = 22.5 µs
    with ProfileDB.create(tmp_path / "convex.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(key(MoeRouting.BALANCED), TokensPoint(8), Measurement(10.0)),
                     (key(MoeRouting.BALANCED), TokensPoint(16), Measurement(40.0))])
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"layers": [[4, 0, 0, 4], [2, 2, 2, 2]]}))
    cm = CostModel.of_kernel_graph(_graph(), None, ProfileDB.open(tmp_path / "convex.db"),
                                   routing=parse_routing(f"corpus:{f}"))
    assert _time(cm, 8) == pytest.approx(25.0)


def test_a_corpus_of_another_expert_count_is_refused(profile, tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"layers": [[4, 0, 0, 4, 0, 0]]}))  # 6 experts; the toy model routes over 4
    with pytest.raises(MoeRoutingError, match="counts tokens for 6 experts per layer but the model routes over 4"):
        CostModel.of_kernel_graph(_graph(), None, profile, routing=parse_routing(f"corpus:{f}"))


def test_power_law_without_its_rows_falls_back_to_balanced_and_says_so(tmp_path):
    with ProfileDB.create(tmp_path / "b.db", ProfileMeta(device="test gpu", engine="vllm")) as db:
        db.put_many([(key(MoeRouting.BALANCED), TokensPoint(8), Measurement(10.0))])
    cm = CostModel.of_kernel_graph(_graph(), None, ProfileDB.open(tmp_path / "b.db"))
    assert _time(cm, 8) == pytest.approx(10.0)
    assert cm.moe_routing.startswith("balanced") and "power-law:1.2 asked for" in cm.moe_routing


def test_no_routed_experts_no_statement():
    x = TensorSpec((1, T, 64), DType.BFLOAT16)
    g = Graph("dense", inputs={"h": x})
    g.nodes = [Node("g", Op.KERNEL, ("h",), (x,), KernelAttrs(KernelKind.GEMM, "gemm", GemmGeometry(n=64, k=64), "bf16"))]
    g.outputs = ["g"]
    assert CostModel.of_kernel_graph(g).moe_routing == ""
    moe = CostModel.of_kernel_graph(_graph())  # no profile: the statement says the roofline ignores the model
    assert "without a profile the MoE roofline spreads tokens evenly" in moe.moe_routing
