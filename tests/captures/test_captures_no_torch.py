"""Capture importers and alignment import without torch (DESIGN §3): a capture can be read and held against a
saved graph on a machine that has no torch."""

import subprocess
import sys

from capture_helpers import kernel_list, vllm_kernel_names, write_json

MODULES = [
    "graphsim.importers.captures", "graphsim.importers.captures.classify", "graphsim.importers.captures.torch_trace",
    "graphsim.importers.captures.nsys", "graphsim.importers.captures.kernel_list",
    "graphsim.importers.captures.summary", "graphsim.costing.align", "graphsim.costing.align_rules",
    "graphsim.costing.align_report", "graphsim.render.capture_view", "graphsim.render.align_view",
    "graphsim.cli.capture_cmd", "graphsim.cli.align_cmd",
]


def test_captures_and_alignment_import_and_run_without_torch(vllm_graph, tmp_path):
    from graphsim.ir import save_graph

    save_graph(vllm_graph, tmp_path / "g.json")
    write_json(tmp_path / "k.json", kernel_list([n for _, n in vllm_kernel_names(vllm_graph)]))
    code = "import sys\n" + "".join(f"import {m}\n" for m in MODULES) + (
        "from graphsim.ir import load_graph\n"
        "from graphsim.importers.captures import load_capture\n"
        "from graphsim.costing.align_report import build_report\n"
        f"cap = load_capture({str(tmp_path / 'k.json')!r})\n"
        f"r = build_report(load_graph({str(tmp_path / 'g.json')!r}), cap, cap.select())\n"
        "assert r.completeness['graph_absent'] == 0, r.completeness\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
