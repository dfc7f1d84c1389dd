"""A DSN as shown or logged (store/dsn.py): no password in any of the forms PostgreSQL clients take."""

from __future__ import annotations

import pytest

from hindsight_server.store.dsn import without_credentials


@pytest.mark.parametrize(
    ("dsn", "shown"),
    [
        ("postgresql://u:hunter2@db:5432/app", "postgresql://u@db:5432/app"),
        ("postgresql://:hunter2@db/app", "postgresql://db/app"),
        ("postgresql://u@db/app?password=hunter2", "postgresql://u@db/app"),
        ("postgres://db/app?sslmode=require&password=hunter2", "postgres://db/app?sslmode=require"),
        ("postgresql://db/app?password=hunter2&sslmode=require", "postgresql://db/app?sslmode=require"),
        (
            "postgresql://db/app?sslkey=/k.pem&sslpassword=hunter2&PASSWORD=hunter2&pass%77ord=hunter2",
            "postgresql://db/app?sslkey=/k.pem",
        ),
        ("postgresql:///app?host=/var/run/pg&user=u", "postgresql:///app?host=/var/run/pg&user=u"),  # as is
        ("host=db password=hunter2 dbname=app", "host=db dbname=app"),
        ("host=db password='hunter 2' sslpassword=x", "host=db"),
    ],
)
def test_no_password_survives(dsn: str, shown: str) -> None:
    assert without_credentials(dsn) == shown
    assert "hunter" not in without_credentials(dsn)
