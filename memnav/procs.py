"""Stopping child processes the way a ROS 2 node expects: SIGINT first (rclpy turns it into a clean shutdown:
memories closed, bags finished), SIGKILL only for one still running after a timeout.

Used by `memnav bench pipeline` for the stack it starts, by the tests for the nodes they start, and by probe
scripts. `memnav launch` has its own, longer ladder (SIGINT, SIGTERM, SIGKILL, per process group).
"""
from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterable


def stop_processes(procs: Iterable[subprocess.Popen], timeout_s: float = 10.0) -> list[str]:
    """SIGINT every process still running, then wait for each in turn (SIGKILL after `timeout_s` s of waiting on
    it).

    Args:
        procs: the processes (ended ones are only waited for).
        timeout_s: how long to wait for each before it is killed, seconds.

    Returns:
        Each process's remaining piped stdout, in order ("" when its output went to a file).
    """
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outs.append(out if out is not None else "")
    return outs
