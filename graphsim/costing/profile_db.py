"""profile.db: SQLite storage of measured kernel times (DESIGN §4).

- `ProfileDB.open(path)` opens read-only for lookups and checks the file: not SQLite, no `meta`
  table or another schema version → a `ProfileDBError` subclass whose message names the fix.
- `ProfileDB.create(path, meta)` opens for writing in WAL mode. An existing file made for the same
  device and engine is *resumed*: its rows stay, `has_row` / `missing` tell a profiler which points
  are still to measure. Writes go in transactions (`put_many`, or `with db.transaction():`), so an
  interrupted run loses at most the transaction in flight.
"""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

import numpy as np

from graphsim.atomic import TMP_SUFFIX, check_writable, publish, remove_stale
from graphsim.costing.errors import ProfileDBCorruptError, ProfileDBError, ProfileDBMismatchError, ProfileDBVersionError
from graphsim.costing.kernels import KernelKey, Measurement, Point, TableKind, check_point, point_coords
from graphsim.costing.schema import ADDED, META_DDL, META_TABLE, SCHEMA_VERSION, TABLES, VALUE_COLUMNS, TableSpec, q

REBUILD_HINT = "rebuild it with `graphsim profile ... -o DB` or `graphsim profiles import-aiconfigurator ... -o DB`"


class TimeStatistic(str, Enum):
    """What `time_us` holds in a profile.db."""

    MEDIAN = "median"  # graphsim's profiler: median of the timed repeats
    MEAN = "mean"  # e.g. aiconfigurator's collector: mean of CUDA-graph replays


def _utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class ProfileMeta:
    """The `meta` table: one row per field; `provenance` is stored as JSON."""

    device: str  # what ran the kernels, e.g. "NVIDIA H200" or "cpu: AMD EPYC 9654"
    hardware: str = ""  # hardware spec id (profiles/hardware/<id>.json) for the roofline fallback
    engine: str = ""  # vllm / sglang / trtllm / torch-eager
    engine_version: str = ""
    torch_version: str = ""
    time_statistic: TimeStatistic = TimeStatistic.MEDIAN
    created_utc: str = field(default_factory=_utc_now)
    provenance: dict[str, str] = field(default_factory=dict)  # free-form origin facts
    schema_version: int = SCHEMA_VERSION

    def to_rows(self) -> list[tuple[str, str]]:
        out = []
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "provenance":
                out.append((f.name, json.dumps(v, sort_keys=True)))
            else:
                out.append((f.name, v.value if isinstance(v, Enum) else str(v)))
        return out

    @classmethod
    def from_rows(cls, rows: dict[str, str]) -> ProfileMeta:
        return cls(
            device=rows.get("device", ""),
            hardware=rows.get("hardware", ""),
            engine=rows.get("engine", ""),
            engine_version=rows.get("engine_version", ""),
            torch_version=rows.get("torch_version", ""),
            time_statistic=TimeStatistic(rows.get("time_statistic", TimeStatistic.MEDIAN.value)),
            created_utc=rows.get("created_utc", ""),
            provenance={str(k): str(v) for k, v in json.loads(rows.get("provenance", "{}")).items()},
            schema_version=int(rows.get("schema_version", "0")),
        )


@dataclass(frozen=True)
class KernelRows:
    """All rows of one kernel geometry: coordinates (n, d) in point order, sorted; times (n,)."""

    key: KernelKey
    coords: np.ndarray  # int64, shape (n, d)
    times_us: np.ndarray  # float64, shape (n,)

    def __len__(self) -> int:
        return len(self.times_us)


def _remove_db_files(path: Path, suffixes: tuple[str, ...] = ("", "-wal", "-shm", "-journal")) -> None:
    """Delete a SQLite file and its journals (those that exist)."""
    for suffix in suffixes:
        Path(str(path) + suffix).unlink(missing_ok=True)


@contextmanager
def staged_copy(path: Path, *, keep_existing: bool) -> Iterator[Path]:
    """A temporary profile.db beside `path` to write into, renamed over `path` when the block ends
    without an error; on an error or Ctrl-C it is deleted and `path` is left as it was. With
    `keep_existing` it starts as a copy of `path` (read through SQLite, write-ahead log included)."""
    check_writable(path, make_parents=True)  # one line when it cannot be written, before anything is
    remove_stale(path.parent, path.name)  # a killed import's staged copy (its process is gone)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=TMP_SUFFIX, dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    tmp.unlink()  # SQLite creates it

    try:
        if keep_existing and path.is_file() and path.stat().st_size > 0:
            try:
                src = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
                dst = sqlite3.connect(tmp)
                try:
                    src.backup(dst)
                finally:
                    dst.close()
                    src.close()
            except sqlite3.DatabaseError as e:
                raise _db_error(e, path) from e
        yield tmp
        _remove_db_files(path, ("-wal", "-shm"))  # the old file's log must not be replayed onto the new one
        publish(tmp, path)
    finally:
        _remove_db_files(tmp)


class ProfileDB:
    """A profile.db connection. Use `open` (read-only) or `create` (write / resume)."""

    def __init__(self, conn: sqlite3.Connection, path: Path, meta: ProfileMeta, readonly: bool) -> None:
        self._conn = conn
        self.path = path
        self.meta = meta
        self.readonly = readonly
        self._tx_depth = 0
        self._rows_cache: dict[KernelKey, KernelRows] = {}

    # ---- opening ------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> ProfileDB:
        """Open an existing profile.db read-only (for lookups)."""
        p = Path(path)
        if not p.is_file():
            raise ProfileDBError(f"no profile.db at '{p}'; build one with `graphsim profile ... -o {p}` "
                                 f"or `graphsim profiles import-aiconfigurator ... -o {p}`")
        conn = sqlite3.connect(p.resolve().as_uri() + "?mode=ro", uri=True, isolation_level=None,
                               check_same_thread=False)
        meta = _validate(conn, p)
        try:  # tables added since the file was written (schema.ADDED) read as empty: TEMP tables of this connection
            for spec in _absent_added(conn):
                conn.execute(spec.ddl().replace("CREATE TABLE", "CREATE TEMP TABLE", 1))
        except sqlite3.DatabaseError as e:
            conn.close()
            raise _db_error(e, p) from e
        return cls(conn, p, meta, readonly=True)

    @classmethod
    def create(cls, path: str | os.PathLike[str], meta: ProfileMeta, *, overwrite: bool = False) -> ProfileDB:
        """Open `path` for writing. A new file gets the schema and `meta`; an existing one is
        resumed if it was made for the same device and engine (else `ProfileDBMismatchError`),
        or replaced when `overwrite`."""
        p = Path(path)
        check_writable(p, make_parents=True)
        if overwrite:
            _remove_db_files(p)
        existed = p.is_file() and p.stat().st_size > 0
        conn = sqlite3.connect(str(p), isolation_level=None, check_same_thread=False)
        if existed:
            old = _validate(conn, p)
            for attr in ("device", "engine", "engine_version"):
                if getattr(old, attr) != getattr(meta, attr):
                    conn.close()
                    raise ProfileDBMismatchError(
                        f"'{p}' holds data for {attr} '{getattr(old, attr)}', not '{getattr(meta, attr)}'; "
                        "write to another file or pass --overwrite")
            meta = replace(meta, created_utc=old.created_utc, provenance={**old.provenance, **meta.provenance})
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(META_DDL)
            for spec in TABLES.values():
                conn.execute(spec.ddl())
            conn.executemany(f"INSERT OR REPLACE INTO {META_TABLE} (key, value) VALUES (?, ?)", meta.to_rows())
            conn.execute("COMMIT")
        except sqlite3.DatabaseError as e:
            conn.close()
            raise _db_error(e, p) from e
        return cls(conn, p, meta, readonly=False)

    def close(self) -> None:
        if not self.readonly:
            # Fold the write-ahead log into the file and leave WAL mode: the .db alone is complete,
            # and readers (also on read-only storage) need no -wal / -shm beside it.
            with suppress(sqlite3.DatabaseError):
                self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._conn.execute("PRAGMA journal_mode=DELETE")
        self._conn.close()

    def __enter__(self) -> ProfileDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writing ------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes: all of them land, or (on an exception or kill) none of them."""
        self._require_writable()
        if self._tx_depth:
            self._tx_depth += 1
            try:
                yield
            finally:
                self._tx_depth -= 1
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")  # waits out another writer up to the busy timeout
        except sqlite3.DatabaseError as e:
            raise _db_error(e, self.path) from e
        self._tx_depth = 1
        try:
            yield
        except BaseException:
            self._tx_depth = 0
            self._conn.execute("ROLLBACK")
            raise
        self._tx_depth = 0
        self._conn.execute("COMMIT")

    def put(self, key: KernelKey, point: Point, measurement: Measurement) -> None:
        """Insert or replace one row (its own transaction unless inside `transaction()`)."""
        self.put_many([(key, point, measurement)])

    def put_many(self, rows: Iterable[tuple[KernelKey, Point, Measurement]]) -> int:
        """Insert or replace rows in one transaction; returns how many."""
        self._require_writable()
        by_kind: dict[TableKind, list[tuple[object, ...]]] = {}
        for key, point, m in rows:
            check_point(key, point)
            spec = TABLES[key.KIND]
            by_kind.setdefault(key.KIND, []).append(
                _key_values(spec, key) + tuple(point_coords(point))
                + (m.time_us, m.p10_us, m.p90_us, m.std_us, m.samples, m.kernel))
        with self.transaction():
            for kind, values in by_kind.items():
                spec = TABLES[kind]
                cols = ", ".join(q(c) for c in spec.all_columns)
                marks = ", ".join("?" * len(spec.all_columns))
                self._exec_many(f"INSERT OR REPLACE INTO {spec.name} ({cols}) VALUES ({marks})", values)
        if not self._tx_depth:  # committed rows reach the .db itself, not only its -wal (a kill keeps them there)
            with suppress(sqlite3.DatabaseError):
                self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self._rows_cache.clear()
        return sum(len(v) for v in by_kind.values())

    def update_provenance(self, extra: dict[str, str]) -> None:
        self._require_writable()
        self.meta = replace(self.meta, provenance={**self.meta.provenance, **extra})
        self._exec(f"INSERT OR REPLACE INTO {META_TABLE} (key, value) VALUES (?, ?)",
                   ("provenance", json.dumps(self.meta.provenance, sort_keys=True)))

    # ---- reading ------------------------------------------------------------------------------

    def get(self, key: KernelKey, point: Point) -> Measurement | None:
        check_point(key, point)
        spec = TABLES[key.KIND]
        where, args = _where(spec, key, point)
        cols = ", ".join(q(n) for n, _ in VALUE_COLUMNS)
        row = self._exec(f"SELECT {cols} FROM {spec.name} WHERE {where}", args).fetchone()
        if row is None:
            return None
        try:
            return Measurement(*row)
        except ValueError as e:  # a row edited by hand: not a measurement
            raise ProfileDBCorruptError(f"'{self.path}': {spec.name} row {point} of {key}: {e}") from None

    def has_row(self, key: KernelKey, point: Point) -> bool:
        check_point(key, point)
        spec = TABLES[key.KIND]
        where, args = _where(spec, key, point)
        return self._exec(f"SELECT 1 FROM {spec.name} WHERE {where} LIMIT 1", args).fetchone() is not None

    def missing(self, key: KernelKey, points: Sequence[Point]) -> list[Point]:
        """The points of `points` that have no row yet for `key` (what a resumed run must measure)."""
        have = {tuple(int(c) for c in row) for row in self.rows(key).coords}
        return [p for p in points if tuple(point_coords(p)) not in have]

    def rows(self, key: KernelKey) -> KernelRows:
        """All rows for one geometry key, sorted by coordinates (cached)."""
        cached = self._rows_cache.get(key)
        if cached is not None:
            return cached
        spec = TABLES[key.KIND]
        where, args = _where(spec, key, None)
        pcols = ", ".join(q(c.name) for c in spec.point_columns)
        data = self._exec(f"SELECT {pcols}, time_us FROM {spec.name} WHERE {where} ORDER BY {pcols}", args).fetchall()
        d = len(spec.point_columns)
        arr = np.asarray(data, dtype=np.float64).reshape(len(data), d + 1)  # NULL (a NaN stored) reads as nan
        # a row whose time is not a finite positive number (edited by hand, or written by another tool)
        # is never a measurement: it is left out here and counted by `invalid_rows`
        arr = arr[np.isfinite(arr[:, d]) & (arr[:, d] > 0)]
        out = KernelRows(key, arr[:, :d].astype(np.int64), arr[:, d].copy())
        self._rows_cache[key] = out
        return out

    def kernel_labels(self, key: KernelKey) -> set[str]:
        """The `kernel` column's distinct non-empty values over `key`'s rows (which kernel the rows timed)."""
        spec = TABLES[key.KIND]
        where, args = _where(spec, key, None)
        data = self._exec(f"SELECT DISTINCT kernel FROM {spec.name} WHERE {where}", args).fetchall()
        return {str(k) for (k,) in data if k}

    def keys_read(self) -> list[KernelKey]:
        """The geometry keys whose rows were read through this connection (`rows`), in the order first read."""
        return list(self._rows_cache)

    def keys(self, kind: TableKind) -> list[KernelKey]:
        """Every geometry key that has rows in `kind`'s table."""
        spec = TABLES[kind]
        kcols = ", ".join(q(c.name) for c in spec.key_columns)
        data = self._exec(f"SELECT DISTINCT {kcols} FROM {spec.name} ORDER BY {kcols}").fetchall()
        return [spec.key_cls(*(c.from_sql(v) for c, v in zip(spec.key_columns, row, strict=True))) for row in data]

    def count(self, kind: TableKind) -> int:
        return int(self._exec(f"SELECT COUNT(*) FROM {TABLES[kind].name}").fetchone()[0])

    def min_time_by_dtype(self, kind: TableKind) -> dict[str, float]:
        """dtype → the smallest positive time of `kind`'s rows of that dtype (tables with a `dtype` column)."""
        data = self._exec(f"SELECT dtype, MIN(time_us) FROM {TABLES[kind].name} WHERE time_us > 0 GROUP BY dtype")
        return {str(d): float(t) for d, t in data.fetchall() if t is not None}

    def counts(self) -> dict[TableKind, int]:
        return {kind: self.count(kind) for kind in TableKind}

    def invalid_rows(self) -> dict[TableKind, int]:
        """Rows per table whose time is not a finite positive number (never used for pricing)."""
        out = {}
        for kind in TableKind:
            bad = f"SELECT COUNT(*) FROM {TABLES[kind].name} WHERE time_us IS NULL OR NOT (time_us > 0 AND time_us < 9e999)"
            n = int(self._exec(bad).fetchone()[0])
            if n:
                out[kind] = n
        return out

    def noisy_rows(self, limit: float) -> dict[TableKind, int]:
        """Valid rows per table whose stored spread (p90 − p10) exceeds `limit` × their time (rows without
        p10/p90, e.g. imported ones, are not counted)."""
        out = {}
        for kind in TableKind:
            sql = (f"SELECT COUNT(*) FROM {TABLES[kind].name} WHERE time_us > 0 AND time_us < 9e999 AND p10_us IS NOT "
                   "NULL AND p90_us IS NOT NULL AND p90_us - p10_us > ? * time_us")
            n = int(self._exec(sql, (limit,)).fetchone()[0])
            if n:
                out[kind] = n
        return out

    # ---- internals ----------------------------------------------------------------------------

    def _require_writable(self) -> None:
        if self.readonly:
            raise ProfileDBError(f"'{self.path}' was opened read-only; open it with ProfileDB.create to write")

    def _exec(self, sql: str, args: Sequence[object] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, args)
        except sqlite3.DatabaseError as e:
            raise _db_error(e, self.path) from e

    def _exec_many(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        try:
            self._conn.executemany(sql, rows)
        except sqlite3.DatabaseError as e:
            raise _db_error(e, self.path) from e


def _key_values(spec: TableSpec, key: KernelKey) -> tuple[object, ...]:
    if type(key) is not spec.key_cls:
        raise ValueError(f"table {spec.name} takes {spec.key_cls.__name__}, got {type(key).__name__}")
    return tuple(v.value if isinstance(v, Enum) else v for v in (getattr(key, c.name) for c in spec.key_columns))


def _where(spec: TableSpec, key: KernelKey, point: Point | None) -> tuple[str, tuple[object, ...]]:
    cols = [c.name for c in spec.key_columns]
    args = _key_values(spec, key)
    if point is not None:
        cols += [c.name for c in spec.point_columns]
        args += tuple(point_coords(point))
    return " AND ".join(f"{q(c)} = ?" for c in cols), args


def _db_error(e: sqlite3.DatabaseError, path: Path) -> ProfileDBError:
    msg = str(e)
    if "locked" in msg or "busy" in msg:  # another writer held it past sqlite3's busy timeout (5 s by default)
        return ProfileDBError(f"'{path}' is being written by another process (SQLite: {msg}); wait for it to finish "
                              "or write to another file")
    if "not a database" in msg or "malformed" in msg or "disk image" in msg:
        return ProfileDBCorruptError(f"'{path}' is not a readable profile.db ({msg}); delete it and {REBUILD_HINT}")
    return ProfileDBError(f"'{path}': SQLite error: {msg}")


def _absent_added(conn: sqlite3.Connection) -> list[TableSpec]:
    """The tables of `schema.ADDED` the file lacks (it was written before they were added)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return [TABLES[k] for k in sorted(ADDED) if TABLES[k].name not in tables]


def _validate(conn: sqlite3.Connection, path: Path) -> ProfileMeta:
    """Check that `conn` is a profile.db of this schema version; return its meta."""
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if META_TABLE not in tables:
            raise ProfileDBCorruptError(f"'{path}' is not a graphsim profile.db (no meta table); {REBUILD_HINT}")
        rows = dict(conn.execute(f"SELECT key, value FROM {META_TABLE}").fetchall())
    except sqlite3.DatabaseError as e:
        conn.close()
        raise _db_error(e, path) from e
    except ProfileDBError:
        conn.close()
        raise
    try:
        version = int(rows.get("schema_version", "0"))
    except ValueError:
        version = 0
    if version != SCHEMA_VERSION:
        conn.close()
        raise ProfileDBVersionError(
            f"'{path}' has profile.db schema version {version}, this graphsim reads version {SCHEMA_VERSION}; "
            f"{REBUILD_HINT}")
    absent = [s.name for s in TABLES.values() if s.name not in tables and s.kind not in ADDED]
    if absent:
        conn.close()
        raise ProfileDBCorruptError(f"'{path}' lacks tables {', '.join(absent)}; {REBUILD_HINT}")
    try:
        return ProfileMeta.from_rows(rows)
    except (ValueError, json.JSONDecodeError) as e:
        conn.close()
        raise ProfileDBCorruptError(f"'{path}' has an unreadable meta table ({e}); {REBUILD_HINT}") from e
