import pytest

from graphsim.catalog import catalog


@pytest.fixture(scope="session")
def catalog_names() -> list[str]:
    return [e.name for e in catalog()]
