"""`hindsight jobs run NAME` and `hindsight jobs list` against a real database, as child processes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hindsight.client import HindsightClient
from hindsight.v1 import memory_pb2 as pb
from tests.support.processes import run_cli

LIFECYCLE_JOBS = ("expire", "purge", "demote", "evict", "patterns")


async def test_jobs_run_prints_what_it_did_and_jobs_list_shows_the_last_run(
    client: HindsightClient, tenant: str, database_dsn: str
) -> None:
    turn = await client.write(tenant, "I need a room for ten people", tier="working", kind="task")
    at = datetime.now(UTC) + timedelta(hours=25)  # past the working memory's 24 h

    ran = await run_cli(["jobs", "run", "expire", "--now", at.isoformat(), "--dsn", database_dsn])
    assert ran.code == 0, ran.stderr
    report = json.loads(ran.stdout)
    assert (report["job"], report["processed"], report["skipped"]) == ("expire", 1, False)
    assert report["elapsed_ms"] >= 0
    assert (await client.get(tenant, turn.memory.id)).status == pb.STATUS_EXPIRED

    listed = await run_cli(["jobs", "list", "--json", "--dsn", database_dsn])
    assert listed.code == 0, listed.stderr
    jobs = {job["job"]: job for job in json.loads(listed.stdout)}
    assert set(LIFECYCLE_JOBS) <= set(jobs)
    assert jobs["expire"]["interval_s"] == 600
    last = jobs["expire"]["last_run"]
    assert (last["processed"], datetime.fromisoformat(last["started_at"])) == (1, at)
    assert last["finished_at"] is not None and last["server"].endswith("(cli)")
    assert jobs["purge"]["last_run"] is None
    readable = await run_cli(["jobs", "list", "--dsn", database_dsn])
    lines = {line.split()[0]: line for line in readable.stdout.splitlines()}
    assert "1 processed" in lines["expire"] and "never ran" in lines["purge"]


async def test_jobs_run_with_an_unknown_name_exits_2_naming_the_jobs(database_dsn: str) -> None:
    result = await run_cli(["jobs", "run", "nosuch", "--dsn", database_dsn])
    assert result.code == 2
    assert "unknown job 'nosuch'" in result.stderr and "Traceback" not in result.stderr
    assert all(name in result.stderr for name in LIFECYCLE_JOBS)
    assert result.stdout == ""
