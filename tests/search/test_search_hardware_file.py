"""A search on a hardware spec loaded from a JSON file that is not bundled: the spec object is carried through
the deployment plans and cost models (it used to be turned back into its id and reloaded, which failed)."""

from search_helpers import small_spec

from graphsim.catalog import resolve_model
from graphsim.costing.hardware import HardwareSpec, load_hardware, save_hardware
from graphsim.serving.search import run_search
from graphsim.serving.search_eval import make_context
from graphsim.serving.search_space import enumerate_candidates


def _rows(res) -> list[dict]:
    rows = [r.to_json() for r in res.rows]
    for row in rows:
        for ev in (row["steady_state"], row["simulated"]):
            if ev:
                ev.pop("sim_wall_s")
    return rows


def test_search_on_a_spec_from_a_json_file_matches_the_bundled_one(small_result, hf_import, tmp_path):
    data = load_hardware("h100").to_json()
    data.update(id="lab_h100", name="Lab H100 (a copy of the bundled H100 spec)", aliases=[])
    path = save_hardware(HardwareSpec.from_json(data), tmp_path / "lab_h100.json")
    spec = small_spec(base={"model": "llama-3.1-8b", "hardware": str(path)})
    model, hw = resolve_model(spec.base.model), load_hardware(spec.base.hardware)
    assert hw.id == "lab_h100"
    cands, _ = enumerate_candidates(spec, model, hw)
    ctx = make_context(spec, model, hw, cands, graph=hf_import(spec.base.model)[0])
    assert ctx.hardware is hw
    res = run_search(spec, context=ctx)
    assert res.hardware == "lab_h100" and "Lab H100" in res.data_note
    # the same numbers as the bundled H100 spec: only the name differs
    assert _rows(res) == _rows(small_result)
    assert [p.to_json() for p in res.pruned] == [p.to_json() for p in small_result.pruned]
