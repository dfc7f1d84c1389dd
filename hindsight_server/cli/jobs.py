"""`hindsight jobs list | run NAME`: the lifecycle jobs' schedule, or one run now (JSON)."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any

from hindsight_server.cli.args import EXIT_USAGE, print_json, timestamp
from hindsight_server.cli.local import add_database_options, on_database
from hindsight_server.config import Settings

if TYPE_CHECKING:  # the server's packages are imported only by the commands that need them
    from hindsight_server.domain.jobs import JobRun
    from hindsight_server.pipelines.jobs import JobRunner


def _job_line(name: str, interval_s: float, run: JobRun | None) -> str:
    if run is None:
        return f"{name:<12} every {interval_s:>7.0f}s  never ran"
    finished = run.finished_at.isoformat() if run.finished_at else "not finished"
    return (
        f"{name:<12} every {interval_s:>7.0f}s  last started {run.started_at.isoformat()}, "
        f"finished {finished}, {run.processed} processed, on {run.server}"
    )


def _job_dict(name: str, interval_s: float, run: JobRun | None) -> dict[str, Any]:
    last = None
    if run is not None:
        last = {
            "started_at": run.started_at.isoformat(),
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "processed": run.processed,
            "server": run.server,
        }
    return {"job": name, "interval_s": interval_s, "last_run": last}


async def _list_jobs(runner: JobRunner, as_json: bool) -> int:
    last = await runner.last_runs()
    jobs = [(job.name, job.interval.total_seconds(), last.get(job.name)) for job in runner.registry]
    if as_json:
        print_json([_job_dict(*job) for job in jobs])
    else:
        for job in jobs:
            print(_job_line(*job))
    return 0


async def _run_job(runner: JobRunner, name: str, now: datetime | None) -> int:
    if name not in runner.registry.names:
        print(
            f"hindsight jobs: unknown job {name!r}; jobs: {', '.join(runner.registry.names)}", file=sys.stderr
        )
        return EXIT_USAGE
    print_json((await runner.run(name, now)).as_dict())
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    from hindsight_server.process.offline import open_jobs

    async def work(settings: Settings) -> int:
        async with open_jobs(settings) as runner:
            if args.jobs_command == "list":
                return await _list_jobs(runner, args.json)
            return await _run_job(runner, args.name, args.now)

    return on_database(args, "jobs", work)


def add_jobs_commands(commands: Any) -> None:
    """Adds jobs list and jobs run to the command parser."""
    jobs = commands.add_parser("jobs", help="the lifecycle jobs: list them, or run one now")
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    for action, help_text in (
        ("list", "each job's interval and last run"),
        ("run", "run one job once, now (prints processed, skipped, elapsed_ms as JSON)"),
    ):
        job = job_commands.add_parser(action, help=help_text)
        add_database_options(job)
        job.set_defaults(handler=cmd_jobs)
        if action == "run":
            job.add_argument("name", help="the job (see `hindsight jobs list`)")
            job.add_argument("--now", type=timestamp, help="run as if at this time (ISO 8601 with offset)")
        else:
            job.add_argument("--json", action="store_true", help="machine-readable output")
