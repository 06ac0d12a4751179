"""Plain analyzer inputs for the rule tests (no torch): a kernel site, an accountant row, and the part of a RowSet
`derive_map` and `check_map` read."""

from __future__ import annotations

from graphsim.work.analyzer import Row, Site
from graphsim.work.analyzer.locations import Member
from graphsim.work.report import SegmentWork


def site(location: str, kind: str, members: tuple[Member, ...] = ()) -> Site:
    return Site(location=location, kernel=location.rsplit("/", 1)[-1], kind=kind, communication=False, count=1,
                time_us=1.0, source="roofline", members=members)


def row(region: str, ref: str) -> Row:
    return Row(region, ref, ref.split(":", 1)[0], SegmentWork(ref, params=1))


class Rows:
    """The part of a RowSet `derive_map` and `check_map` read."""

    def __init__(self, rows: list[Row]):
        self.rows = tuple(rows)

    def of_region(self, region: str) -> tuple[Row, ...]:
        return tuple(r for r in self.rows if r.region == region)
