import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1] / "importers"))  # hyv4_helpers (the tiny HunYuan-V4 config)
