"""Costing errors: each a one-line message naming the problem and the fix (printed by the CLI, exit 2)."""

from __future__ import annotations

from graphsim.errors import GraphsimError


class ProfileDBError(GraphsimError):
    """A profile.db cannot be used."""


class ProfileDBCorruptError(ProfileDBError):
    """The file is not a readable SQLite profile database."""


class ProfileDBVersionError(ProfileDBError):
    """The file's schema version is not the one this graphsim reads."""


class ProfileDBMismatchError(ProfileDBError):
    """Resuming a profile.db that was made for another device or engine."""


class HardwareSpecError(GraphsimError):
    """An unknown or malformed hardware spec."""


class OptionalDependencyError(GraphsimError):
    """A feature needs an optional extra that is not installed."""


class ImportDataError(GraphsimError):
    """External measured data (e.g. aiconfigurator tables) cannot be found or read."""
