"""profile.db schema (DESIGN §4): a `meta` table plus one typed table per `TableKind`.

Columns come from the key and point dataclasses in `kernels.py` (geometry + dtypes, then the
batch-dependent coordinates) followed by the measurement columns; the primary key is key + point.
Bump `SCHEMA_VERSION` whenever a column changes.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, fields
from enum import Enum

from graphsim.costing.kernels import KEY_CLASSES, Measurement, TableKind

SCHEMA_VERSION = 1

META_TABLE = "meta"

# Measurement columns, after key and point columns. Every column holding a time ends in `_us`.
VALUE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("time_us", "REAL NOT NULL CHECK (time_us > 0)"),
    ("p10_us", "REAL"),
    ("p90_us", "REAL"),
    ("std_us", "REAL"),
    ("samples", "INTEGER"),
    ("kernel", "TEXT NOT NULL DEFAULT ''"),
)
assert tuple(name for name, _ in VALUE_COLUMNS) == tuple(f.name for f in fields(Measurement))


def q(identifier: str) -> str:
    """Quote an SQL identifier (column names such as `window` are SQLite keywords)."""
    return '"' + identifier.replace('"', '""') + '"'


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str  # INTEGER or TEXT
    py_type: type  # int, str, or an Enum class

    def to_sql(self, value: object) -> object:
        return value.value if isinstance(value, Enum) else value

    def from_sql(self, value: object) -> object:
        return self.py_type(value)


@dataclass(frozen=True)
class TableSpec:
    kind: TableKind
    key_cls: type
    point_cls: type
    key_columns: tuple[Column, ...]
    point_columns: tuple[Column, ...]

    @property
    def name(self) -> str:
        return self.kind.value

    @property
    def all_columns(self) -> tuple[str, ...]:
        return (
            tuple(c.name for c in self.key_columns)
            + tuple(c.name for c in self.point_columns)
            + tuple(name for name, _ in VALUE_COLUMNS)
        )

    def ddl(self) -> str:
        cols = [f"{q(c.name)} {c.sql_type} NOT NULL" for c in self.key_columns + self.point_columns]
        cols += [f"{q(name)} {decl}" for name, decl in VALUE_COLUMNS]
        pk = ", ".join(q(c.name) for c in self.key_columns + self.point_columns)
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n  " + ",\n  ".join(cols) + f",\n  PRIMARY KEY ({pk})\n) WITHOUT ROWID"


def _columns(cls: type) -> tuple[Column, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        if f.metadata.get("column") is False:  # a key field no table stores (e.g. MoeKey.gated)
            continue
        py_type = hints[f.name]
        if py_type is int:
            sql = "INTEGER"
        elif py_type is str or (isinstance(py_type, type) and issubclass(py_type, Enum)):
            sql = "TEXT"
        else:  # pragma: no cover - guards future key fields
            raise TypeError(f"{cls.__name__}.{f.name}: unsupported column type {py_type!r}")
        out.append(Column(f.name, sql, py_type))
    return tuple(out)


def _spec(kind: TableKind) -> TableSpec:
    key_cls = KEY_CLASSES[kind]
    point_cls = key_cls.POINT
    key_cols, point_cols = _columns(key_cls), _columns(point_cls)
    names = [c.name for c in key_cols + point_cols] + [n for n, _ in VALUE_COLUMNS]
    if len(set(names)) != len(names):  # pragma: no cover
        raise TypeError(f"{kind.value}: column names collide: {names}")
    return TableSpec(kind, key_cls, point_cls, key_cols, point_cols)


TABLES: dict[TableKind, TableSpec] = {kind: _spec(kind) for kind in TableKind}

# Tables added after schema version 1 was first written. A profile.db made before them is still version 1 (no
# column of an existing table changed): opened read-only it gets each as an empty TEMP table of the connection, so
# reads find no rows; opened for writing (a re-import or a resumed profile) it gets each as a real table.
ADDED: frozenset[TableKind] = frozenset({TableKind.DSA_MODULE_PREFILL, TableKind.DSA_MODULE_DECODE})

META_DDL = f"CREATE TABLE IF NOT EXISTS {META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID"
