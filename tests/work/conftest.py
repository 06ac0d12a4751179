"""Shared fixtures for the work-accountant tests: catalog configs by file stem."""

from __future__ import annotations

import json
from importlib import resources

import pytest


def load_config(stem: str) -> dict:
    return json.loads((resources.files("graphsim.catalog") / "configs" / f"{stem}.json").read_text())


def catalog_stems() -> list[str]:
    folder = resources.files("graphsim.catalog") / "configs"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


@pytest.fixture
def config():
    return load_config
