"""costing must import without torch (DESIGN §3), so a graph can be priced on a machine without it."""

import subprocess
import sys

MODULES = [
    "graphsim.costing", "graphsim.costing.timing", "graphsim.costing.dtypes", "graphsim.costing.kernels",
    "graphsim.costing.schema", "graphsim.costing.profile_db", "graphsim.costing.hardware",
    "graphsim.costing.roofline", "graphsim.costing.interpolate", "graphsim.costing.aiconfigurator_tables",
    "graphsim.costing.aiconfigurator_import", "graphsim.cli.profiles_cmd",
]


def test_costing_imports_without_torch():
    code = "import sys\n" + "".join(f"import {m}\n" for m in MODULES) + (
        "from graphsim.costing.aiconfigurator_import import catalog_mla_geometry\n"
        "catalog_mla_geometry('deepseek-ai/DeepSeek-V3')\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "assert not bad, bad\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
