import pytest


@pytest.fixture(autouse=True)
def isolated_home(tmp_path, monkeypatch):
    """No default profile.db: every predicted time is the H200 roofline, the same on every machine."""
    monkeypatch.setenv("GRAPHSIM_HOME", str(tmp_path / "home"))
