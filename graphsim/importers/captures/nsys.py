"""Nsight Systems SQLite export (`nsys export --type sqlite`) → Capture.

Reads `CUPTI_ACTIVITY_KIND_KERNEL` (names through `StringIds`: `demangledName`, else `shortName`),
`CUPTI_ACTIVITY_KIND_MEMCPY` / `_MEMSET` when present, and NVTX ranges from `NVTX_EVENTS`
(push/pop and start/end ranges; text inline or through `textId`). A kernel is placed in an
iteration by the host time and thread of the CUDA API call that launched it
(`CUPTI_ACTIVITY_KIND_RUNTIME`, joined on `correlationId`; kernels of a CUDA graph share the
graph launch's id), or by its device start time when the runtime table is absent.
Timestamps are nanoseconds in the file and microseconds in the Capture.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from graphsim.capture import Capture, CaptureError, Iteration, Launch, LaunchClass
from graphsim.importers.captures.classify import classify_kernel
from graphsim.importers.captures.ranges import IterationBuckets, Range, pick_iterations

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
_PUSH_POP, _START_END = 59, 60
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD", 9: "HtoH",
               10: "PtoP"}


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}


def load_nsys(path: str | Path, iteration_pattern: str | None = None) -> Capture:
    p = Path(path)
    try:
        conn = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.DatabaseError as e:
        raise CaptureError(f"'{p}' is not a readable SQLite file ({e})") from None
    try:
        return _read(conn, p, tables, iteration_pattern)
    except sqlite3.DatabaseError as e:
        raise CaptureError(f"'{p}': SQLite error reading the nsys export ({e})") from None
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, p: Path, tables: set[str], pattern: str | None) -> Capture:
    if KERNEL_TABLE not in tables or "StringIds" not in tables:
        what = "graphsim profile.db" if "meta" in tables else "Nsight Systems export"
        raise CaptureError(f"'{p}' has no {KERNEL_TABLE}/StringIds tables (is it a {what}?); capture with "
                           "`nsys profile -t cuda,nvtx ...` and export with `nsys export --type sqlite`")
    strings = dict(conn.execute("SELECT id, value FROM StringIds"))
    kcols = _columns(conn, KERNEL_TABLE)
    name_col = next((c for c in ("demangledName", "shortName", "mangledName", "name") if c in kcols), None)
    if name_col is None:
        raise CaptureError(f"'{p}': {KERNEL_TABLE} has no kernel-name column (demangledName/shortName)")

    def col(cols: set[str], name: str, default: str = "NULL") -> str:
        return f'"{name}"' if name in cols else default

    rows: list[tuple[float, float, str, str, object, str]] = []  # start_ns, end_ns, name, stream, corr, device
    for start, end, nid, stream, corr, dev in conn.execute(
            f'SELECT start, "end", {name_col}, {col(kcols, "streamId")}, {col(kcols, "correlationId")}, '
            f'{col(kcols, "deviceId")} FROM {KERNEL_TABLE}'):
        name = strings.get(nid, str(nid)) if isinstance(nid, int) else str(nid)
        rows.append((start, end, name, str(stream if stream is not None else ""), corr, str(dev if dev is not None else "")))
    plumbing_rows: list[tuple[float, float, str, str, object, str, str]] = []  # ... and the label
    for table, what in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if table not in tables:
            continue
        cols = _columns(conn, table)
        for start, end, stream, corr, dev, kind, nbytes in conn.execute(
                f'SELECT start, "end", {col(cols, "streamId")}, {col(cols, "correlationId")}, {col(cols, "deviceId")}, '
                f'{col(cols, "copyKind")}, {col(cols, "bytes")} FROM {table}'):
            label = f"[CUDA {what} {_COPY_KINDS.get(kind, '')}]".replace(" ]", "]") if what == "memcpy" else "[CUDA memset]"
            name = label + (f" {nbytes} B" if nbytes is not None else "")
            plumbing_rows.append((start, end, name, str(stream if stream is not None else ""), corr,
                                  str(dev if dev is not None else ""), label))

    runtime: dict[object, tuple[float, str]] = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        rcols = _columns(conn, "CUPTI_ACTIVITY_KIND_RUNTIME")
        if "correlationId" in rcols:
            for start, corr, tid in conn.execute(
                    f'SELECT start, correlationId, {col(rcols, "globalTid")} FROM CUPTI_ACTIVITY_KIND_RUNTIME'):
                runtime[corr] = (start / 1e3, str(tid) if tid is not None else "")

    ranges: list[Range] = []
    if "NVTX_EVENTS" in tables:
        ncols = _columns(conn, "NVTX_EVENTS")
        text = "COALESCE(text, '')" if "text" in ncols else "''"
        for start, end, etype, txt, tid_, tid in conn.execute(
                f'SELECT start, "end", {col(ncols, "eventType")}, {text}, {col(ncols, "textId")}, '
                f'{col(ncols, "globalTid")} FROM NVTX_EVENTS WHERE "end" IS NOT NULL AND "end" > start'):
            if etype is not None and etype not in (_PUSH_POP, _START_END):
                continue
            name = txt or (strings.get(tid_, "") if tid_ is not None else "")
            thread = str(tid) if (tid is not None and etype == _PUSH_POP) else ""
            ranges.append(Range(name, start / 1e3, end / 1e3, thread))

    device = "cuda"
    if "TARGET_INFO_GPU" in tables and "name" in _columns(conn, "TARGET_INFO_GPU"):
        names = [r[0] for r in conn.execute("SELECT DISTINCT name FROM TARGET_INFO_GPU") if r[0]]
        if names:
            device = ", ".join(names)

    iters = pick_iterations(ranges, pattern, str(p))
    placed = IterationBuckets(iters)
    items = [(s, e, n, st, c, d, "") for s, e, n, st, c, d in rows] + plumbing_rows
    for start, end, name, stream, corr, dev, plumb_label in sorted(items, key=lambda r: r[0]):
        if plumb_label:
            what = "memset" if "memset" in plumb_label else "memcpy"
            klass, op, label, plumb = LaunchClass.PLUMBING, what, plumb_label, what
        else:
            klass, op, label, plumb = classify_kernel(name)
        launch = Launch(name, start / 1e3, max(0.0, (end - start) / 1e3), klass, op, label, plumb, stream,
                        f"cuda:{dev}" if dev else device)
        placed.add(launch, runtime.get(corr) if corr is not None else None)
    buckets, unplaced = placed.buckets, placed.unplaced

    notes: list[str] = []
    if iters and not runtime:
        notes.append("no CUPTI_ACTIVITY_KIND_RUNTIME table: kernels were placed in NVTX ranges by their device "
                     "start time (launch latency may shift kernels at range edges)")
    if unplaced:
        notes.append(f"{unplaced} launches fall outside every iteration range and are left out")
    out: list[Iteration] = []
    if not iters:
        launches = sorted(buckets.get(0, []), key=lambda x: x.start_us)
        if launches:
            out.append(Iteration(0, "capture", launches[0].start_us,
                                 max(x.start_us + x.duration_us for x in launches), tuple(launches)))
    else:
        for i, r in enumerate(iters):
            launches = sorted(buckets.get(i, []), key=lambda x: x.start_us)
            if launches:
                out.append(Iteration(len(out), r.name, r.start_us, r.end_us, tuple(launches)))
    if not out:
        raise CaptureError(f"'{p}' holds no kernel launches" + (" inside its iteration ranges" if iters else ""))
    return Capture(str(p), "nsys-sqlite", device, "GPU kernel time (device clock)", tuple(out), tuple(notes))
