"""The argv that starts a program as another user, or tied to this process's life, without Popen doing
either.

Popen's `preexec_fn` and `user=` make CPython fork() instead of vfork(), and in a process whose gRPC
threads are busy (the supervisor polls its children's health over gRPC) the forked child ran gRPC's fork
handlers before its exec and crashed there (SIGABRT, SIGSEGV: a standby restarted under load never
came up). So Popen starts this launcher with vfork, and the launcher, a fresh interpreter, becomes the
user, sets PR_SET_PDEATHSIG (after the change of user, which clears it), checks that its parent did
not die before that, and execs the program: the same pid, the program's own argv.
"""

from __future__ import annotations

import os
import sys

_PR_SET_PDEATHSIG = 1  # linux/prctl.h

_LAUNCHER = f"""
import ctypes, os, pwd, signal, sys
parent, user, die_with_parent, argv = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", sys.argv[4:]
if user:
    entry = pwd.getpwnam(user)
    os.initgroups(user, entry.pw_gid)
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
if die_with_parent:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl({_PR_SET_PDEATHSIG}, signal.SIGTERM)
    if os.getppid() != parent:
        sys.exit(1)
os.execvp(argv[0], argv)
"""


def launched(argv: list[str], *, user: str | None = None, die_with_parent: bool = False) -> list[str]:
    """argv run as `user` (None: this process's), getting SIGTERM if this process dies when asked."""
    if not user and not die_with_parent:
        return argv
    flag = "1" if die_with_parent else "0"
    return [sys.executable, "-c", _LAUNCHER, str(os.getpid()), user or "", flag, *argv]
