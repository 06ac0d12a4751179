"""Measured by default: the first price on a GPU builds its profile.db from aiconfigurator-core's tables.

When no `--profile` is given and `$GRAPHSIM_HOME/profiles/<gpu>_vllm.db` is missing, but aiconfigurator-core is
installed and ships vLLM tables for that GPU's system (its data directory is named by graphsim's hardware id,
e.g. h200_sxm), the tables are imported once into that path (`graphsim profiles import-aiconfigurator`, the
package's current vLLM version for the system) with a progress bar and a one-line notice on stderr; every later
run prices from the file. GRAPHSIM_NO_AUTO_PROFILE=1 (`graphsim --no-auto-profile`) turns this off; a failed
build is a notice, and the prices fall back to the roofline as before.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

NO_AUTO_PROFILE_ENV = "GRAPHSIM_NO_AUTO_PROFILE"
BACKEND = "vllm"


def enabled() -> bool:
    return os.environ.get(NO_AUTO_PROFILE_ENV, "").strip().lower() in ("", "0", "false", "no")


def _notice(message: str) -> None:
    print(f"notice: {message}", file=sys.stderr, flush=True)


def available_system(hardware_id: str, root: Path | None = None, backend: str = BACKEND) -> Path | None:
    """aiconfigurator's `systems` directory when the package is installed and has `backend` tables (vllm, sglang or
    trtllm) for `hardware_id`."""
    from graphsim.costing import aiconfigurator_import as aic
    from graphsim.errors import GraphsimError

    try:
        root = root or aic.aiconfigurator_root()
    except GraphsimError:
        return None
    if hardware_id not in aic.list_systems(root) or backend not in aic.list_backends(root, hardware_id):
        return None
    return root


def auto_build(hardware_id: str, out: Path, root: Path | None = None, backend: str = BACKEND) -> bool:
    """Build `out` from aiconfigurator's `backend` tables for `hardware_id` when enabled and possible; True when
    built."""
    if not enabled() or out.exists():
        return False
    root = available_system(hardware_id, root, backend)
    if root is None:
        return False
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from graphsim.costing import aiconfigurator_import as aic
    from graphsim.errors import GraphsimError

    _notice(f"no profile.db for {hardware_id}: building {out} once from aiconfigurator-core {aic.package_version()}'s "
            f"measured {backend} tables (about 30 s; {NO_AUTO_PROFILE_ENV}=1 or `graphsim --no-auto-profile` skips this)")
    console = Console(stderr=True)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console, transient=True) as progress:
            task = progress.add_task("aiconfigurator import", total=None)

            def on_progress(what: str, done: int, total: int) -> None:
                progress.update(task, description=what, completed=done, total=total)

            aic.import_aiconfigurator(hardware_id, backend, out, progress=on_progress, root=root)
    except (GraphsimError, OSError) as e:
        _notice(f"could not build {out} ({e}); pricing without measured rows")
        return False
    return True


_warned: set[str] = set()


def unread_tables(provenance: dict[str, str], root: Path | None = None) -> list[str]:
    """aiconfigurator-core tables that graphsim now imports for a profile's system, backend and version, and that
    the import which wrote the profile did not read (an older graphsim read fewer: DSA module rows, DeepEP
    dispatch/combine rows, …). Empty for a profile that is not an aiconfigurator import, one imported with
    `--tables` (a chosen subset), or when the package is not installed or lacks that system."""
    from graphsim.costing import aiconfigurator_import as aic
    from graphsim.errors import GraphsimError

    if provenance.get("source") != aic.PACKAGE or provenance.get("tables", "all") != "all":
        return []
    system, backend, version = provenance.get("system", ""), provenance.get("backend", ""), provenance.get(
        "backend_version", "")
    try:
        root = root or aic.aiconfigurator_root()
        if system not in aic.list_systems(root) or backend not in aic.list_backends(root, system):
            return []
        located, _ = aic.locate_tables(root, system, backend, version)
    except (GraphsimError, OSError):
        return []
    return sorted(loc.spec.table for loc in located if f"table.{loc.spec.table}" not in provenance)


def warn_if_stale(path: str, provenance: dict[str, str], root: Path | None = None) -> list[str]:
    """One notice per profile and process when `unread_tables` is not empty, naming the command that re-imports
    it; returns those tables."""
    missing = unread_tables(provenance, root)
    if missing and path not in _warned:
        _warned.add(path)
        _notice(f"{path} was imported without aiconfigurator-core's {', '.join(missing)} (an older graphsim did not "
                f"read them), so kernels those rows price fall back to other rows or the roofline; re-import it: "
                f"graphsim profiles import-aiconfigurator --system {provenance.get('system')} --backend "
                f"{provenance.get('backend')} -o {path} --overwrite")
    return missing

