"""Location maps, validated both ways: every shipped map is well formed and fits the catalog models of
its family exactly; maps that break a rule (a location missing, listed twice or communication; a row
unconsumed, consumed twice or unknown) are rejected, and a deployment no map fits is unsupported —
never half-analysed. The deployment-side checks use the accountant (config only) and hand-built sites."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from itertools import combinations

import pytest

from graphsim.catalog import resolve_model
from graphsim.work import accounting
from graphsim.work.analyzer import (
    Deployment, LocationMapError, Site, analyze, check_map, draft_map, load_map, necessary_rows, select_map,
    shipped_map_paths, shipped_maps, validate_map_data,
)
from graphsim.workload import parse_batch_spec

STEP = parse_batch_spec("decode:64x2048")


def gqa_dense() -> dict:
    path = next(p for p in shipped_map_paths() if p.name == "gqa-dense.json")
    return json.loads(path.read_text())


def llama_rows():
    return necessary_rows(accounting(resolve_model("llama-3.1-8b").config), STEP, ["full.dense"] * 32)


def llama_sites() -> list[Site]:
    """The non-communication locations of Llama-3.1-8B fused for vLLM (as the gqa-dense map lists
    them), plus the TP all-reduce a tp=2 deployment adds."""
    sites = []
    for region, entries in gqa_dense()["regions"].items():
        for e in entries:
            sites.append(Site(f"{region}/{e['at']}", e["at"].split("/")[-1], "gemm", False,
                              32 if region != "outside" else 1, 1.0, "roofline"))
    sites.append(Site("full.dense/self_attn.o_proj/all_reduce", "all_reduce", "all_reduce", True, 32, 1.0, "roofline"))
    return sites


def check(data: dict):
    m = validate_map_data(data)
    return check_map(m, llama_sites(), llama_rows(), "vllm")


def entry(data: dict, region: str, at: str) -> dict:
    return next(e for e in data["regions"][region] if e["at"] == at)


# --- accepted ----------------------------------------------------------------------------------


def test_shipped_maps_load_and_have_distinct_location_sets():
    maps = shipped_maps()
    assert len(maps) >= 10
    assert len({m.id for m in maps}) == len(maps)
    for a, b in combinations(maps, 2):
        assert a.locations != b.locations, f"{a.label} and {b.label} list the same locations"


def test_gqa_dense_fits_llama_exactly():
    c = check(gqa_dense())
    assert c.ok, c.problems
    assert [r.ref for r in c.assignment["full.dense/mlp/gate_up_proj"]] == ["ffn.mlp:mlp.gate_proj", "ffn.mlp:mlp.up_proj"]
    assert c.assignment["full.dense/self_attn/rotary_embedding"] == ()
    # a part reference consumes every row of the part
    assert [r.ref for r in c.assignment["full.dense/self_attn/qkv_proj"]] == [
        "attn.qkv:self_attn.q_proj", "attn.qkv:self_attn.k_proj", "attn.qkv:self_attn.v_proj"]


# --- rejected on its own -----------------------------------------------------------------------


def _invalid(data: dict, message: str) -> None:
    with pytest.raises(LocationMapError, match=message):
        validate_map_data(data)


def test_location_listed_twice_is_rejected():
    d = gqa_dense()
    d["regions"]["full.dense"].append({"at": "mlp/silu_and_mul", "rows": []})
    _invalid(d, r"location full.dense/mlp/silu_and_mul is listed twice")


def test_row_consumed_twice_in_one_map_is_rejected():
    d = gqa_dense()
    entry(d, "full.dense", "self_attn/rotary_embedding")["rows"] = ["attn.qkv"]
    _invalid(d, r"row full.dense:attn.qkv is consumed twice")
    d = gqa_dense()  # a part and one of its modules overlap
    entry(d, "full.dense", "mlp/silu_and_mul")["rows"] = ["attn.qkv:self_attn.q_proj"]
    _invalid(d, r"attn.qkv:self_attn.q_proj is consumed twice \(by part 'attn.qkv'")


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.update(schema_version=2), "schema_version"),
    (lambda d: d.pop("fuse_target"), "fuse_target"),
    (lambda d: d.update(id="GQA Dense"), r"id: must be a lower-case name such as 'gqa-dense' \(got 'GQA Dense'\)"),
    (lambda d: d["regions"]["full.dense"].append({"at": "no-slash", "rows": []}),
     r"full\.dense\[\d+\]\.at: must be 'scope-role/kernel'"),
    (lambda d: d["regions"]["full.dense"].append({"at": "mlp/x", "rows": ["mlp"]}), "row reference 'mlp'"),
    (lambda d: d["regions"]["outside"].append({"at": "model/x", "rows": ["attn.qkv"]}), "not a segment"),
    (lambda d: d["regions"]["full.dense"].append({"at": "mlp/x", "rows": [], "where": 1}), "unknown field"),
])
def test_malformed_maps_are_rejected(mutate, message):
    d = gqa_dense()
    mutate(d)
    _invalid(d, message)


def test_duplicate_json_keys_are_rejected(tmp_path):
    text = json.dumps(gqa_dense(), indent=1).replace('"outside": [', '"full.dense": [], "outside": [', 1)
    path = tmp_path / "dup.json"
    path.write_text(text)
    with pytest.raises(LocationMapError, match=r"duplicate key 'full\.dense'"):
        load_map(path)


# --- rejected against a deployment ---------------------------------------------------------------


def test_missing_location_is_rejected():
    d = gqa_dense()
    d["regions"]["full.dense"] = [e for e in d["regions"]["full.dense"] if e["at"] != "mlp/silu_and_mul"]
    c = check(d)
    assert not c.ok and "location full.dense/mlp/silu_and_mul is not listed" in c.problems


def test_unknown_and_communication_locations_are_rejected():
    d = gqa_dense()
    d["regions"]["full.dense"].append({"at": "self_attn.o_proj/all_reduce", "rows": []})
    d["regions"]["full.dense"].append({"at": "mlp/gelu_and_mul", "rows": []})
    problems = check(d).problems
    assert any("full.dense/self_attn.o_proj/all_reduce is communication" in p for p in problems)
    assert any("full.dense/mlp/gelu_and_mul does not exist" in p for p in problems)


def test_unconsumed_row_is_rejected():
    d = gqa_dense()
    entry(d, "full.dense", "mlp.down_proj/down_proj")["rows"] = []
    c = check(d)
    assert "row full.dense:ffn.mlp:mlp.down_proj (layers.ffn.mlp) is not consumed by any location" in c.problems


def test_row_consumed_by_two_locations_is_rejected():
    # the file validator already refuses a reference repeated in a region or a part next to one of its
    # modules; the deployment check refuses double consumption of a map built any other way too
    m = validate_map_data(gqa_dense())
    entries = tuple(replace(e, rows=("final_norm", "head")) if e.at == "model/fused_add_rms_norm" else e
                    for e in m.entries)
    c = check_map(replace(m, entries=entries), llama_sites(), llama_rows(), "vllm")
    assert "row outside:head is consumed 2 times (outside/model/fused_add_rms_norm, outside/lm_head/lm_head)" in c.problems


def test_unknown_row_is_rejected():
    d = gqa_dense()
    entry(d, "full.dense", "self_attn/rotary_embedding")["rows"] = ["attn.q:self_attn.q_a_proj"]
    c = check(d)
    assert any("row full.dense:attn.q:self_attn.q_a_proj does not exist for this model" in p for p in c.problems)


def test_no_fitting_map_means_unsupported_not_half_analysed():
    d = gqa_dense()
    entry(d, "full.dense", "mlp.down_proj/down_proj")["rows"] = []
    broken = validate_map_data(d)
    choice = select_map([broken], llama_sites(), llama_rows(), "vllm")
    assert not choice.ok and "breaks the exactly-once rules" in choice.reason and "not consumed" in choice.reason
    dep = Deployment("llama", "LlamaForCausalLM", "h200", "", 2, 1, 2, "decode:64x2048", STEP, 4.8e12, 10.0, "roofline")
    a = analyze(dep, llama_sites(), llama_rows(), choice)
    assert not a.necessary_work_available and a.locations == [] and a.coverage is None and a.redundancy is None
    out = a.to_dict()
    assert out["necessary_work_available"] is False and "reason" in out and "locations" not in out
    # another family's map lists other locations: unsupported, naming the closest map
    choice = select_map([m for m in shipped_maps() if m.id == "mla-moe"], llama_sites(), llama_rows(), "vllm")
    assert not choice.ok and "no location map lists this deployment's locations; closest is mla-moe v1" in choice.reason
    # a map for another fuse target does not fit either
    other = copy.deepcopy(gqa_dense())
    other["fuse_target"] = "eager"
    assert any("fuse target 'eager'" in p for p in check(other).problems)


def test_draft_map_lists_every_location_and_fails_until_rows_are_placed():
    draft = draft_map(llama_sites(), llama_rows(), "vllm", "my-family")
    m = validate_map_data(draft)
    assert len(m.entries) == len([s for s in llama_sites() if not s.communication])
    c = check_map(m, llama_sites(), llama_rows(), "vllm")
    assert c.distance == 0 and not c.ok and len(draft["notes"]) == len(llama_rows().rows)


def test_schema_problems_are_reported_all_at_once():
    d = gqa_dense()
    d.update(schema_version=2, version=True, id="Bad Id", extra_key=1)  # a bool is not a version
    d.pop("title")
    d["regions"]["outside"][0]["rows"] = "embed"
    with pytest.raises(LocationMapError) as e:
        validate_map_data(d)
    msg = str(e.value)
    assert msg.startswith("location map: ") and "(+" in msg  # more than four problems: the first four, and a count
    for fragment in ("schema_version: input should be 1 (got 2)", "id: must be a lower-case name", "version: ",
                     "title: field required"):
        assert fragment in msg, msg
    assert msg.endswith("(this graphsim reads schema_version 1)")
    d = gqa_dense()
    d.update(version=0)
    d["regions"]["outside"][0]["rows"] = "embed"
    d["regions"]["outside"][1]["note"] = 3
    with pytest.raises(LocationMapError) as e:
        validate_map_data(d)
    msg = str(e.value)
    assert "version: input should be greater than or equal to 1 (got 0)" in msg
    assert "outside[0].rows: input should be a valid list" in msg and "outside[1].note: input should be a valid string" in msg
