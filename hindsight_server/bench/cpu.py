"""CPU time of the stack's processes on this machine, for figures per request beside latency (CPU moves
less than wall time on shared cores). Counts the memory servers (by pid, from their Ops/Status), every
PostgreSQL process and the Triton server with its model processes; a target on another machine has
none of them here, and its figures are then absent rather than wrong."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psutil

_POSTGRES = "postgres"
_TRITON = ("tritonserver", "triton_python_backend_stub")


@dataclass(frozen=True, slots=True)
class CpuSample:
    seconds: dict[tuple[str, int], float]  # (group, pid) -> CPU seconds (user + system) so far

    def per_call_ms(self, later: CpuSample, calls: int) -> dict[str, float]:
        """Each group's CPU per call between this sample and a later one: what each process spent in
        between (all of it for one started since). A process that ended in between (an autovacuum
        worker, a closed connection's backend) is left out: its last slice is not counted."""
        if calls <= 0:
            return {}
        spent: dict[str, float] = {}
        for (group, pid), seconds in later.seconds.items():
            spent[group] = spent.get(group, 0.0) + seconds - self.seconds.get((group, pid), 0.0)
        return {group: total * 1000 / calls for group, total in spent.items()}


def sample(server_pids: Iterable[int], within: int | None = None) -> CpuSample:
    """The CPU seconds so far of the memory servers, PostgreSQL and Triton running on this machine;
    with `within`, only of that process's descendants (a private stack: not another stack's beside it)."""
    servers = set(server_pids)
    descendants = [] if within is None else psutil.Process(within).children(recursive=True)
    mine = None if within is None else {child.pid for child in descendants}
    seconds: dict[tuple[str, int], float] = {}
    for process in psutil.process_iter(["pid", "name", "cpu_times"]):
        times = process.info["cpu_times"]
        if times is None:
            continue  # gone, or not ours to read
        name = process.info["name"] or ""
        pid = process.info["pid"]
        if mine is not None and pid not in mine:
            continue
        if pid in servers:
            group = "server"
        elif name.startswith(_POSTGRES):
            group = _POSTGRES
        elif name.startswith(_TRITON):
            group = "triton"
        else:
            continue
        seconds[(group, pid)] = times.user + times.system
    return CpuSample(seconds)
