"""The kit's process helpers: a process's tree and its peak memory (``process_tree``,
``peak_rss_mib``), beside the role process the product itself supervises with
(``runtime.role_process``: ``RoleProcess``, ``die_with_parent``, ``log_tail``), re-exported here
for the kit.
"""

from __future__ import annotations

from pathlib import Path

from runtime.role_process import RoleProcess, die_with_parent, log_tail

__all__ = ["RoleProcess", "die_with_parent", "log_tail", "peak_rss_mib", "process_tree"]


def process_tree(pid: int) -> list[int]:
    """``pid`` and every live descendant of it (a supervisor's workers, say). Read from every
    process's parent in /proc/<pid>/stat, which every Linux has (``task/<tid>/children`` needs
    CONFIG_PROC_CHILDREN, and a thread that ends between two reads hides its children)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # it ended a moment ago
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree, unseen = [], [pid]
    while unseen:
        each = unseen.pop()
        tree.append(each)
        unseen += children.get(each, [])
    return tree


def peak_rss_mib(pid: int) -> float:
    """The most resident memory one process of ``pid``'s tree has had so far (the kernel's
    VmHWM); 0 for a process that is gone."""
    peak = 0.0
    for each in process_tree(pid):
        try:
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]) / 1024)
        except OSError:  # it ended a moment ago
            continue
    return peak
