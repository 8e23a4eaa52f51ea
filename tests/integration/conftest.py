"""Integration fixtures: one Prefect test server (its own SQLite database) for the session."""
import pytest


@pytest.fixture(scope="session", autouse=True)
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
