"""Episode results of a simulator served over topics, completed from the agent's own account of its decisions.

The sim bridge scores each episode itself (success, SPL, path); which layer of the agent ended it and the belief
at its STOP come from the agent's `/memnav/policy_state`, matched to the episode here (`AgentStates`), and the
results are written in the format of `memnav eval --json` (`write_results`).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from memnav.core.types import EpisodeStatus
from memnav.sim.runner import RunnerConfig

RESULTS_WAIT_S = 2.0   # how long the results file waits for the last decision's policy state


class AgentStates:
    """Which layer ended each episode and the belief at its STOP, from the agent's /memnav/policy_state.

    The policy state names the colour frame its decision was computed from (`stamp_ns`); the bridge knows the
    frame each episode's last action answered (lock-step), so it can give that episode's result the agent's
    `mode` (`ended_by`) and, after a STOP, its `belief` (`stop_belief`), whichever of the two arrives first.
    In real time the bridge does not know which of its frames the agent decided on (`expect_real_time`): a STOP
    is matched to the agent's STOP state of that goal, a step limit to its newest state of that goal.
    Results are updated in place in `results` (the runner's list). A restarted episode's result replaces its earlier
    attempt's in the same place, so when it ends, a state still awaited for the earlier attempt is no longer awaited
    (arriving late, it would have overwritten the new attempt's).
    """

    def __init__(self, results: list, keep: int = 256) -> None:
        self.results = results
        self.keep = keep
        self._states: dict[int, dict] = {}
        self._pending: dict[int, int] = {}
        # real time: [index, goal stamp, next goal's stamp or None] of an episode awaiting its STOP state
        self._stop_pending: list | None = None

    @property
    def waiting(self) -> bool:
        """Some ended episode still waits for its last decision's state."""
        return bool(self._pending) or self._stop_pending is not None

    def add(self, body: dict) -> None:
        """A policy state (the JSON of /memnav/policy_state).

        Raises:
            KeyError, TypeError, ValueError: no integer stamp_ns.
        """
        stamp = int(body["stamp_ns"])
        self._states[stamp] = body
        while len(self._states) > self.keep:
            self._states.pop(next(iter(self._states)))
        if stamp in self._pending:
            self._apply(self._pending.pop(stamp), body)
        if self._stop_pending is not None and _stop_of(body, *self._stop_pending[1:]):
            self._apply(self._stop_pending[0], body)
            self._stop_pending = None

    def expect(self, stamp_ns: int, index: int) -> None:
        """Episode `index` of the results ended with the action decided on frame `stamp_ns`."""
        self._forget(index)
        if stamp_ns in self._states:
            self._apply(index, self._states[stamp_ns])
        else:
            self._pending[stamp_ns] = index

    def expect_real_time(self, index: int, goal_stamp_ns: int) -> None:
        """Real time: episode `index`, whose goal image was stamped `goal_stamp_ns`, ended by a STOP (the agent's
        STOP state decided on a frame after the goal's, whenever it arrives) or at the step limit (the newest state
        of a frame after the goal's that has arrived by now)."""
        self._forget(index)
        if self.results[index].status is EpisodeStatus.STOPPED:
            stop = next((b for b in reversed(self._states.values()) if _stop_of(b, goal_stamp_ns)), None)
            if stop is None:
                self._stop_pending = [index, goal_stamp_ns, None]
            else:
                self._apply(index, stop)
            return
        newest = max((t for t in self._states if t >= goal_stamp_ns), default=None)
        if newest is not None:
            self._apply(index, self._states[newest])

    def goal_started(self, goal_stamp_ns: int) -> None:
        """Real time: a new goal image went out; decisions on its frames belong to the next episode."""
        if self._stop_pending is not None and self._stop_pending[2] is None:
            self._stop_pending[2] = goal_stamp_ns

    def _forget(self, index: int) -> None:
        """Episode `index` ended (again): a state still awaited for it is an earlier attempt's, whose result the
        runner has just replaced with this one."""
        self._pending = {stamp: i for stamp, i in self._pending.items() if i != index}
        if self._stop_pending is not None and self._stop_pending[0] == index:
            self._stop_pending = None

    def _apply(self, index: int, body: dict) -> None:
        r = self.results[index]
        belief = body.get("belief")
        stopped = r.status is EpisodeStatus.STOPPED and body.get("action") == "STOP" and belief is not None
        self.results[index] = replace(r, ended_by=str(body.get("mode") or ""),
                                      stop_belief=float(belief) if stopped else None)


def _stop_of(body: dict, goal_stamp_ns: int, next_goal_stamp_ns: int | None = None) -> bool:
    """A policy state of a STOP decided on a frame at or after a goal image's stamp (and before the next one's)."""
    stamp = int(body["stamp_ns"])
    return (body.get("action") == "STOP" and stamp >= goal_stamp_ns
            and (next_goal_stamp_ns is None or stamp < next_goal_stamp_ns))


def write_results(path: str, agent: str, results: list, run_cfg: RunnerConfig, lifelong: bool = False,
                  **meta) -> Path:
    """The bridge's episode results as a `memnav eval --json` file (strict JSON, written whole, then renamed into
    place); `lifelong`: the agent kept its long-term memory across them, so the file gives SPL by visit as well
    (`lifelong_spl_by_visit`, `lifelong_spl_known_house`, as `memnav eval --lifelong`). `meta`: more top-level
    keys (e.g. `odometry_origin`, `lifelong_earlier_memory`)."""
    from memnav.core.files import json_safe, replace_files
    from memnav.sim.metrics import lifelong_known_house_spl, lifelong_spl_by_visit, results_document

    out = Path(path)
    extra = {"lifelong_spl_by_visit": lifelong_spl_by_visit(results),
             "lifelong_spl_known_house": lifelong_known_house_spl(results)} if lifelong else {}
    doc = results_document(agent, results, split=run_cfg.split, data=run_cfg.data, backend=run_cfg.backend,
                           lifelong=lifelong, source="sim_bridge_node", **extra, **meta)
    # strict JSON: a NaN (a stop belief never computed) is null, as in `memnav eval --json`
    replace_files({out: (json.dumps(json_safe(doc), indent=2, allow_nan=False) + "\n").encode()})
    return out
