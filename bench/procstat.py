"""CPU time of other processes, from /proc (proc(5)): the broker's, a process tree's."""

from __future__ import annotations

import os

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces: split after its closing parenthesis.
        return f.read().rsplit(")", 1)[1].split()


def cpu_seconds(pid, *, children: bool = True) -> float:
    """User + system time of ``pid`` (plus its reaped children's with ``children``)."""
    fields = _stat_fields(pid)
    # utime, stime, cutime, cstime are fields 14-17; fields[0] here is field 3.
    return sum(int(x) for x in fields[11:15 if children else 13]) / _TICK


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU of ``root`` and its live descendants, and of the exited children
    they reaped."""
    parents = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                parents[pid] = _stat_fields(pid)[1]
            except OSError:
                continue
    tree, frontier = {str(root)}, [str(root)]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    total = 0.0
    for pid in tree:
        try:
            total += cpu_seconds(pid)
        except OSError:
            pass
    return total
