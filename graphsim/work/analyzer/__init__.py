"""The necessary-work analyzer: location maps, coverage (R6) and redundancy (R7).

It ties the accountant's rows (config-only necessary work) to a deployment's CostTree locations
through a versioned location map (`work/location_maps/*.json`) and holds each location's predicted
time and performed work against them. Like the accountant it imports neither torch nor the
importers nor costing: the CLI layer (`graphsim.analysis`) hands it plain `Site` records.
"""

from graphsim.work.analyzer.analysis import (
    Analysis, Coverage, Deployment, LocationResult, Necessary, Redundancy, RedundancySummary, analyze, unsupported,
)
from graphsim.work.analyzer.locations import Performed, Site, location_ids, scope_role, split_location
from graphsim.work.analyzer.maps import (
    LocationMap, LocationMapError, MapCheck, MapChoice, MapEntry, check_map, draft_map, load_map, select_map,
    shipped_map_paths, shipped_maps, validate_map_data,
)
from graphsim.work.analyzer.rows import (
    OUTSIDE, Reconciliation, Row, RowSet, UnsupportedDeployment, necessary_rows, reconcile, region_layers,
)

__all__ = [
    "OUTSIDE", "Analysis", "Coverage", "Deployment", "LocationMap", "LocationMapError",
    "LocationResult", "MapCheck", "MapChoice", "MapEntry", "Necessary", "Performed", "Reconciliation", "Redundancy",
    "RedundancySummary", "Row", "RowSet", "Site", "UnsupportedDeployment", "analyze", "check_map", "draft_map", "load_map",
    "location_ids", "necessary_rows", "reconcile", "region_layers", "scope_role", "select_map", "shipped_map_paths",
    "shipped_maps", "split_location", "unsupported", "validate_map_data",
]
