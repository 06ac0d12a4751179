"""Location maps: where each necessary-work row lands among a deployment's CostTree locations.

A map is a versioned JSON file in `work/location_maps/`, one per architecture family and
deployment location set (the non-communication kernels the fuse pass makes for it). It lists, per
fold region, every non-communication location exactly once with the rows it consumes — an empty
list where a location has no compulsory work (rotary, activation epilogues, placeholders) — and
every row must be consumed exactly once. A map says *where* work lands, never *how much*: the
amounts come from the accountant (DESIGN §5, rule 9).

    {"schema": "graphsim.location-map", "schema_version": 1, "id": "gqa-dense", "version": 1,
     "title": "...", "fuse_target": "vllm",
     "regions": {"full.dense": [{"at": "self_attn/qkv_proj", "rows": ["attn.qkv"]}, ...],
                 "outside": [{"at": "lm_head/lm_head", "rows": ["head"]}, ...]}}

A row reference is a part (`attn.qkv`: every row of that part in the region) or one module of a
part (`ffn.mlp:mlp.gate_proj`); outside the layers it is a segment (`embed`, `final_norm`, `head`).
`validate_map_data` checks a map on its own; `check_map` checks it against a deployment; a
deployment no map fits exactly is unsupported, never half-analysed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictInt, StrictStr, ValidationError
from pydantic_core import PydanticCustomError

from graphsim.errors import GraphsimError
from graphsim.validation import Strict, problems, read_text
from graphsim.work.analyzer.locations import Site, member_sites
from graphsim.work.analyzer.rows import OUTSIDE, OUTSIDE_SEGMENTS, Row, RowSet

if TYPE_CHECKING:
    from typing_extensions import LiteralString

SCHEMA = "graphsim.location-map"
SCHEMA_VERSION = 1
_ID = re.compile(r"^[a-z0-9][a-z0-9.+-]*$")
_AT = re.compile(r"^[^/\s]+/[^/\s#]+(#[2-9]\d*|#1\d+)?$")
_PART = r"(attn|ffn)\.[a-z_]+"
_REF = re.compile(rf"^{_PART}(:[A-Za-z0-9_.]+)?$")


class LocationMapError(GraphsimError):
    """A location map file that breaks the schema or the exactly-once rules."""


@dataclass(frozen=True)
class MapEntry:
    region: str
    at: str  # "role/kernel[#k]" inside the region
    rows: tuple[str, ...]
    note: str = ""

    @property
    def location(self) -> str:
        return f"{self.region}/{self.at}"


@dataclass(frozen=True)
class LocationMap:
    id: str
    version: int
    title: str
    fuse_target: str
    entries: tuple[MapEntry, ...]
    notes: tuple[str, ...] = ()
    path: str = ""

    @property
    def label(self) -> str:
        return f"{self.id} v{self.version}"

    @property
    def locations(self) -> frozenset[str]:
        return frozenset(e.location for e in self.entries)

    @property
    def regions(self) -> tuple[str, ...]:
        """Each region once, in order of first appearance."""
        return tuple(dict.fromkeys(e.region for e in self.entries))


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise LocationMapError(f"duplicate key '{k}'")
        out[k] = v
    return out


def _summary(where: str, problems: list[str]) -> str:
    shown = "; ".join(problems[:4])
    more = f" (+{len(problems) - 4} more)" if len(problems) > 4 else ""
    return f"{where}: {shown}{more}"


def _matching(rx: re.Pattern[str], code: LiteralString, message: LiteralString) -> AfterValidator:
    """A validator that lets a string through when `rx` matches it, else the error `code` with `message`."""
    def check(v: str) -> str:
        if not rx.match(v):
            raise PydanticCustomError(code, message)
        return v

    return AfterValidator(check)


class _EntryFile(Strict):
    """One location of a region: `at` is 'scope-role/kernel' (optionally '#k', k >= 2), `rows` the row
    references it consumes (empty: no compulsory work)."""

    at: Annotated[str, _matching(_AT, "at_form", "must be 'scope-role/kernel' (optionally '#k', k >= 2)")]
    rows: list[StrictStr]
    note: StrictStr = ""


class _MapFile(Strict):
    """The JSON form of a location map: types, required and unknown keys, id pattern, version >= 1. The
    exactly-once rules over its entries are checked after (`validate_map_data`)."""

    schema_: Literal["graphsim.location-map"] = Field(alias="schema")
    schema_version: Literal[1]
    id: Annotated[StrictStr, _matching(_ID, "id_form", "must be a lower-case name such as 'gqa-dense'")]
    version: StrictInt = Field(ge=1)
    title: StrictStr = Field(min_length=1)
    fuse_target: StrictStr = Field(min_length=1)
    notes: tuple[StrictStr, ...] = ()
    regions: dict[str, list[_EntryFile]] = Field(min_length=1)


def _map_where(loc: tuple[int | str, ...]) -> str:
    """`regions.<region>.<i>.<field>` as `<region>[i].field` (region names have dots of their own)."""
    if len(loc) >= 3 and loc[0] == "regions" and isinstance(loc[2], int):
        return f"{loc[1]}[{loc[2]}]" + "".join(f".{p}" for p in loc[3:])
    return ".".join(str(p) for p in loc) or "(document)"


def validate_map_data(data: Any, where: str = "location map") -> LocationMap:
    """Check a map's schema (pydantic: `_MapFile`) and then its internal exactly-once rules; raise
    LocationMapError naming every problem."""
    try:
        f = _MapFile.model_validate(data)
    except ValidationError as e:
        found = problems(e, _map_where)
        hint = f" (this graphsim reads schema_version {SCHEMA_VERSION})" if any(
            p.startswith("schema_version") for p in found) else ""
        raise LocationMapError(_summary(where, found) + hint) from None
    errors: list[str] = []
    entries: list[MapEntry] = []
    for region, items in f.regions.items():
        seen_at: set[str] = set()
        seen_refs: dict[str, str] = {}
        for item in items:
            at, refs = item.at, item.rows
            label = f"{region}/{at}"
            if at in seen_at:
                errors.append(f"location {label} is listed twice")
            seen_at.add(at)
            for ref in refs:
                ok = ref in OUTSIDE_SEGMENTS if region == OUTSIDE else bool(_REF.match(ref))
                if not ok:
                    want = "a segment (embed, final_norm, head)" if region == OUTSIDE else "'block.part' or 'block.part:module'"
                    errors.append(f"{label}: row reference {ref!r} is not {want}")
                    continue
                if ref in seen_refs:
                    errors.append(f"row {region}:{ref} is consumed twice ({seen_refs[ref]} and {at})")
                seen_refs[ref] = at
            entries.append(MapEntry(region, at, tuple(refs), item.note))
        for ref, at in seen_refs.items():
            part = ref.split(":", 1)[0]
            if ":" in ref and part in seen_refs:
                errors.append(f"row {region}:{ref} is consumed twice (by part '{part}' at {seen_refs[part]} and at {at})")
    if errors:
        raise LocationMapError(_summary(where, errors))
    return LocationMap(f.id, f.version, f.title, f.fuse_target, tuple(entries), tuple(f.notes))


def load_map(path: str | Path) -> LocationMap:
    p = Path(path)
    try:
        text = read_text(p, "location map")
    except ValueError as e:
        raise LocationMapError(str(e)) from None
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as e:
        raise LocationMapError(f"location map {p} is not valid JSON: {e.msg} at line {e.lineno}") from None
    except LocationMapError as e:
        raise LocationMapError(f"location map {p}: {e}") from None
    m = validate_map_data(data, f"location map {p.name}")
    return LocationMap(m.id, m.version, m.title, m.fuse_target, m.entries, m.notes, str(p))


def shipped_map_paths() -> list[Path]:
    folder = resources.files("graphsim.work") / "location_maps"
    return sorted(Path(str(p)) for p in folder.iterdir() if p.name.endswith(".json"))


def shipped_maps() -> list[LocationMap]:
    return [load_map(p) for p in shipped_map_paths()]


# --- against a deployment --------------------------------------------------------------------


@dataclass(frozen=True)
class MapCheck:
    """A map held against one deployment: problems (empty when it fits) and, if it fits, the assignment."""

    map: LocationMap
    missing: tuple[str, ...]  # deployment locations the map does not list
    extra: tuple[str, ...]  # listed locations the deployment does not have
    problems: tuple[str, ...]  # every broken rule, including missing/extra
    assignment: dict[str, tuple[Row, ...]]  # location → rows it consumes (complete only when ok)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def distance(self) -> int:
        return len(self.missing) + len(self.extra)


def merged_view(m: LocationMap, sites: list[Site]) -> LocationMap:
    """`m` as it reads on a deployment whose generated kernels replace some of the locations it names (vLLM's
    compiled mode: a `triton_fused` kernel for a q norm and a k norm, `Site.members`): a generated kernel whose every
    member the map lists, and which it does not list itself, takes one entry in place of its members' entries, with
    all their rows. A member two generated kernels share (a rotary run as a q and a k kernel) gives its rows to the
    first. A map that names the generated kernels, or the custom-op kernels of a deployment without them, reads as
    it is; one that lists only some members of a kernel is left as it is (then its member locations do not exist).
    A site may be a member of itself (MoE experts whose measured rows hold their router's top-k, which is then no
    site of its own: `analysis.sites.read_sites`): its entry and the router's become one."""
    have = {s.location for s in sites}
    listed = {e.location: e for e in m.entries}
    taken: dict[str, str] = {}  # member location -> the generated kernel taking its entry's rows
    merged: dict[str, list[MapEntry]] = {}  # a generated kernel's location -> its members' entries
    for s in sites:
        locs = list(dict.fromkeys(x.location for x in s.members))
        if (not locs or (s.location in listed and s.location not in locs)
                or any(x not in listed or (x in have and x != s.location) for x in locs)):
            continue
        merged[s.location] = [listed[x] for x in locs]
        for x in locs:
            taken.setdefault(x, s.location)
    if not merged:
        return m
    index = {e.location: i for i, e in enumerate(m.entries)}
    at_entry: dict[int, list[str]] = {}  # a map entry's index -> the generated kernels listed in its place
    for loc, members in merged.items():
        at_entry.setdefault(min(index[x.location] for x in members), []).append(loc)
    entries: list[MapEntry] = []
    for i, e in enumerate(m.entries):
        for loc in at_entry.get(i, []):
            members = merged[loc]
            rows = tuple(r for x in members if taken[x.location] == loc for r in x.rows)
            notes = "; ".join(dict.fromkeys(x.note for x in members if x.note))
            what = (f"one generated kernel for {', '.join(x.at for x in members)}" if loc not in index
                    else f"with {', '.join(x.at for x in members if x.location != loc)}")
            entries.append(MapEntry(e.region, loc.split("/", 1)[1], rows, what + (f" ({notes})" if notes else "")))
        if e.location not in taken:
            entries.append(e)
    return LocationMap(m.id, m.version, m.title, m.fuse_target, tuple(entries), m.notes, m.path)


def check_map(m: LocationMap, sites: list[Site], rows: RowSet, fuse_target: str) -> MapCheck:
    """Every non-communication location listed exactly once; every row consumed exactly once. A map is read through
    the deployment's generated kernels first (`merged_view`)."""
    m = merged_view(m, sites)
    problems: list[str] = []
    if m.fuse_target != fuse_target:
        problems.append(f"map is for fuse target '{m.fuse_target}', the deployment was fused for '{fuse_target}'")
    comm = {s.location for s in sites if s.communication}
    have = [s.location for s in sites if not s.communication]
    dup = sorted({x for x in have if have.count(x) > 1})
    if dup:
        problems.append(f"the deployment has several kernels named {', '.join(dup)}; locations are not unique")
    listed = m.locations
    missing = tuple(x for x in have if x not in listed)
    extra = tuple(sorted(x for x in listed if x not in set(have)))
    for x in missing:
        problems.append(f"location {x} is not listed")
    for x in extra:
        problems.append(f"location {x} is communication; maps list only non-communication locations"
                        if x in comm else f"location {x} does not exist in this deployment")
    assignment: dict[str, tuple[Row, ...]] = {}
    used: dict[tuple[str, str], list[str]] = {}
    for e in m.entries:
        region_rows = rows.of_region(e.region)
        got: list[Row] = []
        for ref in e.rows:
            match = [r for r in region_rows if (r.ref == ref if (":" in ref or e.region == OUTSIDE) else r.part == ref)]
            if not match:
                problems.append(f"{e.location}: row {e.region}:{ref} does not exist for this model "
                                f"(rows there: {', '.join(r.ref for r in region_rows) or 'none'})")
            for r in match:
                used.setdefault(r.key, []).append(e.location)
            got.extend(match)
        assignment[e.location] = tuple(got)
    for r in rows.rows:
        at = used.get(r.key, [])
        if not at:
            problems.append(f"row {r.region}:{r.ref} ({r.segment}) is not consumed by any location")
        elif len(at) > 1:
            problems.append(f"row {r.region}:{r.ref} is consumed {len(at)} times ({', '.join(at)})")
    return MapCheck(m, missing, extra, tuple(problems), assignment)


@dataclass(frozen=True)
class MapChoice:
    """The map that fits a deployment, or why none does."""

    check: MapCheck | None  # the fitting map's check (None when no map fits)
    reason: str  # empty when a map fits
    candidates: tuple[MapCheck, ...] = ()

    @property
    def ok(self) -> bool:
        return self.check is not None and self.check.ok


def select_map(maps: list[LocationMap], sites: list[Site], rows: RowSet, fuse_target: str) -> MapChoice:
    """The one map whose location set equals the deployment's and whose rows check out."""
    if not maps:
        return MapChoice(None, "no location maps to choose from")
    checks = sorted((check_map(m, sites, rows, fuse_target) for m in maps), key=lambda c: (c.distance, len(c.problems)))
    same_set = [c for c in checks if c.distance == 0 and c.map.fuse_target == fuse_target]
    fitting = [c for c in same_set if c.ok]
    if len(fitting) == 1:
        return MapChoice(fitting[0], "", tuple(checks))
    if len(fitting) > 1:
        return MapChoice(None, "several location maps fit this deployment ("
                         + ", ".join(c.map.label for c in fitting) + "); keep one per location set", tuple(checks))
    best = same_set[0] if same_set else checks[0]
    head = (f"location map {best.map.label} lists this deployment's locations but breaks the exactly-once rules"
            if same_set else f"no location map lists this deployment's locations; closest is {best.map.label} "
            f"({len(best.missing)} missing, {len(best.extra)} extra)")
    return MapChoice(None, _summary(head, list(best.problems)), tuple(checks))


def draft_map(sites: list[Site], rows: RowSet, fuse_target: str, map_id: str = "new-family") -> dict[str, Any]:
    """A skeleton map for a deployment no map fits: every non-communication location with an empty
    row list, and the rows still to place in `notes`. It fails validation until every row is placed. A generated
    kernel of vLLM's compiled mode is listed as the custom-op kernels it replaced (`member_sites`), so the map fits
    the compiled graph and the custom-op one alike (`merged_view`)."""
    regions: dict[str, list[dict[str, Any]]] = {}
    runs_in = {m.location: s.location for s in sites for m in s.members if m.location != s.location}
    for s in member_sites(sites):
        if s.communication:
            continue
        region, at = s.location.split("/", 1)
        note = f"{s.kind} kernel" + (f" (runs in {runs_in[s.location]})" if s.location in runs_in else "")
        regions.setdefault(region, []).append({"at": at, "rows": [], "note": note})
    todo = [f"place {r.region}:{r.ref} ({r.segment})" for r in rows.rows]
    return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "id": map_id, "version": 1,
            "title": "DRAFT: assign every row to the location whose kernel performs it, then delete these notes",
            "fuse_target": fuse_target, "notes": todo, "regions": regions}
