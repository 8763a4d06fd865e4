"""Fixtures of the ledger tests: a throwaway PostgreSQL server, and ``ledger_at`` -- a ledger's
location as a file or on that server, so that one test runs against both backends.

The server (:mod:`_postgres_server`) is started once per test process. Where none can be started
the server tests skip with one line saying why -- unless ``DPTENSOR_REQUIRE_POSTGRES=1`` (CI sets
it), where that is a failure.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _postgres_server import Cluster, NoServer, start_cluster  # noqa: E402


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[Cluster]:
    """A running PostgreSQL cluster for this test process (stopped and deleted at the end)."""
    try:
        cluster = start_cluster()
    except NoServer as exc:
        if os.environ.get("DPTENSOR_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"DPTENSOR_REQUIRE_POSTGRES=1 but no PostgreSQL server could be started: {exc}")
        pytest.skip(f"no PostgreSQL server for the server ledger's tests: {exc}")
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def server_url(postgres_cluster: Cluster) -> Callable[..., str]:
    """``server_url(dataset, user=None)``: the URL of data set ``dataset``'s ledger in a database of this
    test's own (created for it)."""
    database = f"test_{uuid.uuid4().hex[:12]}"
    postgres_cluster.sql(f"CREATE DATABASE {database}", database="postgres")  # (a generated name)

    def url(dataset: str = "ledger", user: str | None = None) -> str:
        return postgres_cluster.url(user, database, dataset=dataset)

    url.database = database  # type: ignore[attr-defined]
    return url


@pytest.fixture(params=["file", "server"])
def ledger_at(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Path | str]:
    """``ledger_at(name)``: where a test's ledger ``name`` lives -- a file, or a server data set."""
    if request.param == "file":
        return lambda name: tmp_path / name
    return request.getfixturevalue("server_url")
