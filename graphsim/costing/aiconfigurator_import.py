"""Import the measured kernel tables shipped in `aiconfigurator-core` into a profile.db.

The optional package (`pip install 'graphsim[aiconfigurator]'`, Apache-2.0) ships Parquet tables
measured on real GPUs at `aiconfigurator_core/systems/data/<system>/<family>/<backend>/<version>/`.
`import_aiconfigurator` picks the tables for one system and serving backend, converts them with
`aiconfigurator_tables`, and writes them with provenance (package version, system, backend and the
version each table came from) into profile.db. A table missing at the requested version is taken
from the newest older version that has it (as aiconfigurator itself back-fills), and says so.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path

from graphsim.costing.aiconfigurator_tables import (
    Columns, Converted, MlaGeometry, convert_context_attention, convert_context_mla, convert_custom_allreduce,
    convert_dsa_context_module, convert_dsa_generation_module, convert_gemm, convert_generation_attention,
    convert_generation_mla, convert_mla_context_module, convert_mla_generation_module, convert_moe, convert_moe_a2a,
    convert_nccl,
)
from graphsim.costing.errors import ImportDataError, OptionalDependencyError
from graphsim.costing.hardware import list_hardware
from graphsim.costing.kernels import TableKind
from graphsim.costing.profile_db import ProfileDB, ProfileMeta, TimeStatistic, staged_copy

PACKAGE = "aiconfigurator-core"
MODULE = "aiconfigurator_core"
INSTALL_HINT = "pip install 'graphsim[aiconfigurator]'"
MLA_REFERENCE_MODEL = "deepseek-ai/DeepSeek-V3"  # the model aiconfigurator's plain MLA tables were collected for
COLLECTOR = ("aiconfigurator collector: each case captured in a CUDA graph, 3 warm-ups, 6 timed replays with "
             "CUDA events, mean kept (bf16/fp8 GEMMs: 6 layer instances per replay, divided by 6; vLLM fp8_block "
             "GEMMs: one instance, timed without a CUDA graph, read as in costing/eager_rows.py; DSA context modules: "
             "timed eagerly, without a CUDA graph, collect_mla_module.py run_mla_module)")

ProgressFn = Callable[[str, int, int], None]  # (what is happening, steps done, total steps)


@dataclass(frozen=True)
class TableSpec:
    """Where one aiconfigurator table lives and how to convert it."""

    table: str  # file stem, e.g. "gemm_perf"
    family: str  # directory under data/<system>/, e.g. "gemm"
    kind: TableKind


TABLE_SPECS: tuple[TableSpec, ...] = (
    TableSpec("gemm_perf", "gemm", TableKind.GEMM),
    TableSpec("context_attention_perf", "attention", TableKind.ATTENTION_PREFILL),
    TableSpec("generation_attention_perf", "attention", TableKind.ATTENTION_DECODE),
    TableSpec("context_mla_perf", "mla", TableKind.MLA_PREFILL),
    TableSpec("generation_mla_perf", "mla", TableKind.MLA_DECODE),
    TableSpec("mla_context_module_perf", "mla", TableKind.MLA_MODULE_PREFILL),
    TableSpec("mla_generation_module_perf", "mla", TableKind.MLA_MODULE_DECODE),
    TableSpec("dsa_context_module_perf", "sparse_attention", TableKind.DSA_MODULE_PREFILL),
    TableSpec("dsa_generation_module_perf", "sparse_attention", TableKind.DSA_MODULE_DECODE),
    TableSpec("moe_perf", "moe", TableKind.MOE),
    TableSpec("nccl_perf", "comm", TableKind.COLLECTIVE),  # comm/nccl/<nccl version>/
    TableSpec("custom_allreduce_perf", "comm", TableKind.COLLECTIVE),
    TableSpec("moe_a2a_perf", "comm", TableKind.COLLECTIVE),  # DeepEP dispatch/combine (costing/all2all.py)
)


@dataclass(frozen=True)
class LocatedTable:
    spec: TableSpec
    path: Path
    version: str  # the version directory it was read from
    back_filled: bool  # True when taken from an older version than requested


@dataclass(frozen=True)
class ImportedTable:
    table: str
    kind: TableKind
    source: str  # path relative to the package's data directory
    version: str
    back_filled: bool
    rows_written: int
    summary: str


@dataclass(frozen=True)
class ImportReport:
    db_path: Path
    system: str
    backend: str
    version: str
    package_version: str
    device: str
    tables: tuple[ImportedTable, ...]
    not_found: tuple[str, ...]  # table stems absent for this system/backend at any usable version
    counts: dict[TableKind, int]


# ---- locating the package and its data -----------------------------------------------------------


def aiconfigurator_root() -> Path:
    """The installed package's `systems` directory; a one-line error naming the extra if absent."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise OptionalDependencyError(f"{PACKAGE} is not installed; {INSTALL_HINT}")
    root = Path(next(iter(spec.submodule_search_locations))) / "systems"
    if not (root / "data").is_dir():
        raise ImportDataError(f"{PACKAGE} at {root.parent} has no systems/data directory; reinstall it ({INSTALL_HINT})")
    return root


def package_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _yaml(path: Path) -> dict:
    import yaml  # a dependency of aiconfigurator-core

    return yaml.safe_load(path.read_text()) or {}


def list_systems(root: Path) -> list[str]:
    return sorted(p.name for p in (root / "data").iterdir() if p.is_dir())


def list_backends(root: Path, system: str) -> list[str]:
    return sorted({p.parent.name for p in (root / "data" / system).glob("*/*/*") if p.is_dir()} - {"nccl"})


def default_version(root: Path, system: str, backend: str) -> str:
    """The backend's `current` version for this system (systems/query_versions.yaml)."""
    qv = _yaml(root / "query_versions.yaml")
    slot = (qv.get("overrides", {}).get(system, {}) or {}).get(backend) or qv.get("defaults", {}).get(backend)
    if not slot or not slot.get("current"):
        raise ImportDataError(f"no default {backend} version for {system} in query_versions.yaml; pass --version")
    return str(slot["current"])


def _version_key(v: str) -> tuple:
    try:
        from packaging.version import Version

        return (0, Version(v))
    except Exception:  # non-PEP 440 names sort after, by their numbers
        return (1, tuple(int(x) for x in re.findall(r"\d+", v)))


def _pick(dirs: list[Path], version: str, stem: str) -> tuple[Path, str, bool] | None:
    """The file `stem`.parquet at `version`, else at the newest older version that has it."""
    have = {d.name: d / f"{stem}.parquet" for d in dirs if (d / f"{stem}.parquet").is_file()}
    if version in have:
        return have[version], version, False
    want = _version_key(version)
    older = [v for v in have if _version_key(v)[0] == want[0] and _version_key(v) < want]
    if not older:
        return None
    best = max(older, key=_version_key)
    return have[best], best, True


def backend_versions(root: Path, system: str, backend: str) -> list[str]:
    """The backend versions measured for `system` (directories under its kernel families, not comm)."""
    base = root / "data" / system
    names = {d.name for spec in TABLE_SPECS if spec.family != "comm"
             for d in (base / spec.family / backend).glob("*") if d.is_dir()}
    return sorted(names, key=_version_key)


def locate_tables(root: Path, system: str, backend: str, version: str) -> tuple[list[LocatedTable], list[str]]:
    """The tables to import for (system, backend, version), and the stems not found."""
    base = root / "data" / system
    found, missing = [], []
    nccl_version = str((_yaml(root / f"{system}.yaml").get("misc", {}) or {}).get("nccl_version", "")) \
        if (root / f"{system}.yaml").is_file() else ""
    for spec in TABLE_SPECS:
        if spec.table == "nccl_perf":
            dirs = sorted((base / "comm" / "nccl").glob("*"))
            picked = _pick(dirs, nccl_version, spec.table) if nccl_version else None
            if picked is None and dirs:  # no pinned version: newest available
                cands = [d for d in dirs if (d / "nccl_perf.parquet").is_file()]
                if cands:
                    d = max(cands, key=lambda p: _version_key(p.name))
                    picked = (d / "nccl_perf.parquet", d.name, False)
        else:
            picked = _pick(sorted((base / spec.family / backend).glob("*")), version, spec.table)
        if picked is None:
            missing.append(spec.table)
        else:
            found.append(LocatedTable(spec, picked[0], picked[1], picked[2]))
    return found, missing


# ---- MLA geometry from the graphsim catalog ---------------------------------------------------------


@cache
def catalog_mla_geometry(model: str) -> MlaGeometry | None:
    from graphsim.catalog import resolve_model
    from graphsim.errors import GraphsimError

    try:
        config = resolve_model(model).config
        return MlaGeometry.from_config(config)
    except (GraphsimError, KeyError, TypeError, ValueError):
        return None


# ---- the import ---------------------------------------------------------------------------------


def collector_mla_geometry(model: str) -> MlaGeometry | None:
    """The MLA / DSA geometry of `model` from the config aiconfigurator's collector built it from (the package's
    `model_configs/<org>--<name>_config.json`, collector/vllm/collect_mla_module.py `_resolve_model_path`), else
    from the graphsim catalog."""
    spec = importlib.util.find_spec(MODULE)
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "model_configs" / f"{model.replace('/', '--')}_config.json"
        try:
            return MlaGeometry.from_config(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    return catalog_mla_geometry(model)


def _read_columns(path: Path) -> Columns:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise OptionalDependencyError(f"reading aiconfigurator tables needs pyarrow; {INSTALL_HINT}") from None
    try:
        return pq.read_table(path).to_pydict()
    except Exception as e:  # pyarrow raises several types for unreadable files
        raise ImportDataError(f"cannot read {path}: {e}") from e


def _reference_mla_geometry() -> MlaGeometry:
    """The MLA geometry of the model aiconfigurator's MLA tables were measured with."""
    geometry = catalog_mla_geometry(MLA_REFERENCE_MODEL)
    if geometry is None:
        raise ImportDataError(f"the MLA geometry of {MLA_REFERENCE_MODEL} is not in the graphsim catalog")
    return geometry


# table → its converter
_CONVERTERS: dict[str, Callable[[Columns], Converted]] = {
    "gemm_perf": convert_gemm,
    "context_attention_perf": convert_context_attention,
    "generation_attention_perf": convert_generation_attention,
    "context_mla_perf": lambda cols: convert_context_mla(cols, _reference_mla_geometry()),
    "generation_mla_perf": lambda cols: convert_generation_mla(cols, _reference_mla_geometry()),
    "mla_context_module_perf": lambda cols: convert_mla_context_module(cols, catalog_mla_geometry),
    "mla_generation_module_perf": lambda cols: convert_mla_generation_module(cols, catalog_mla_geometry),
    "dsa_context_module_perf": lambda cols: convert_dsa_context_module(cols, collector_mla_geometry),
    "dsa_generation_module_perf": lambda cols: convert_dsa_generation_module(cols, collector_mla_geometry),
    "moe_perf": convert_moe,
    "nccl_perf": convert_nccl,
    "custom_allreduce_perf": convert_custom_allreduce,
    "moe_a2a_perf": convert_moe_a2a,
}


def convert_table(spec: TableSpec, cols: Columns) -> Converted:
    """Dispatch one table to its converter."""
    convert = _CONVERTERS.get(spec.table)
    if convert is None:  # pragma: no cover
        raise ValueError(f"no converter for {spec.table}")
    return convert(cols)


def import_aiconfigurator(
    system: str,
    backend: str,
    out: str | os.PathLike[str],
    *,
    version: str | None = None,
    tables: Sequence[str] | None = None,
    overwrite: bool = False,
    progress: ProgressFn | None = None,
    root: Path | None = None,
) -> ImportReport:
    """Convert aiconfigurator-core's tables for `system` / `backend` into the profile.db `out`.

    `version` defaults to the backend's current version for the system; `tables` restricts the
    import to some table stems (default: all of `TABLE_SPECS`). `root` overrides the
    package's `systems` directory (tests). An existing `out` for the same device and backend
    version is merged into; pass `overwrite` to start afresh."""
    root = root or aiconfigurator_root()
    systems = list_systems(root)
    if system not in systems:
        raise ImportDataError(f"aiconfigurator has no data for system '{system}'; systems: {', '.join(systems)}")
    backends = list_backends(root, system)
    if backend not in backends:
        raise ImportDataError(f"aiconfigurator has no {backend} data for {system}; backends: {', '.join(backends)}")
    chosen = version or default_version(root, system, backend)
    measured = backend_versions(root, system, backend)
    if measured and chosen not in measured:  # else every table would be back-filled under a made-up label
        raise ImportDataError(f"aiconfigurator has no {backend} {chosen} tables for {system}; "
                              f"measured versions: {', '.join(measured)}")
    located, not_found = locate_tables(root, system, backend, chosen)
    if tables is not None:
        unknown = sorted(set(tables) - {s.table for s in TABLE_SPECS})
        if unknown:
            raise ImportDataError(f"unknown aiconfigurator tables {', '.join(unknown)}; "
                                  f"known: {', '.join(s.table for s in TABLE_SPECS)}")
        located = [loc for loc in located if loc.spec.table in tables]
        not_found = [t for t in not_found if t in tables]
    if not located:
        raise ImportDataError(f"no aiconfigurator tables for {system} / {backend} {chosen}")

    total = 2 * len(located)
    step = 0

    def tick(what: str) -> None:
        nonlocal step
        if progress is not None:
            progress(what, step, total)
        step += 1

    converted: list[tuple[LocatedTable, Converted]] = []
    device = ""
    for loc in located:
        tick(f"read {loc.spec.table}")
        cols = _read_columns(loc.path)
        if not device and cols.get("device"):
            device = str(cols["device"][0])
        converted.append((loc, convert_table(loc.spec, cols)))

    spec_ids = {s.id for s in list_hardware()}
    data_dir = root / "data"
    provenance = {
        "source": PACKAGE,
        "package_version": package_version(),
        "license": "Apache-2.0",
        "system": system,
        "backend": backend,
        "backend_version": chosen,
        "version_choice": "--version" if version else "query_versions.yaml current",
        "tables": "all" if tables is None else ", ".join(sorted(tables)),  # a chosen subset is not stale
        "imported_utc": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "collector": COLLECTOR,
        "units": "latency ms → time_us; message_size elements × dtype bytes → message_bytes; "
                 "kv_len = step (cached tokens) + isl (new tokens)",
        "mla_geometry": f"plain MLA tables: {MLA_REFERENCE_MODEL} dims from the graphsim catalog; "
                        "module tables: their model column's dims",
    }
    for loc, _ in converted:
        provenance[f"table.{loc.spec.table}"] = str(loc.path.relative_to(data_dir)) + (" (back-filled)" if loc.back_filled else "")
    meta = ProfileMeta(
        device=device or system,
        hardware=system if system in spec_ids else "",
        engine=backend,
        engine_version=chosen,
        time_statistic=TimeStatistic.MEAN,
        provenance=provenance,
    )
    imported = []
    # Written to a temporary copy beside `out` and renamed when complete: an interrupted or failed
    # import leaves `out` as it was (or absent), never half filled.
    with staged_copy(Path(out), keep_existing=not overwrite) as staged, ProfileDB.create(staged, meta) as db:
        for loc, conv in converted:
            tick(f"write {loc.spec.table} ({len(conv.rows)} rows)")
            written = db.put_many(conv.rows)
            imported.append(ImportedTable(loc.spec.table, loc.spec.kind, str(loc.path.relative_to(data_dir)),
                                          loc.version, loc.back_filled, written, conv.summary()))
        counts = db.counts()
    if progress is not None:
        progress("done", total, total)
    return ImportReport(Path(out), system, backend, chosen, provenance["package_version"], meta.device,
                        tuple(imported), tuple(not_found), counts)
