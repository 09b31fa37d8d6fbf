"""Velocity guard: the last check between the policy's velocity command and the robot's base.

It limits speed and acceleration, and commands zero when the robot is driving blind (the newest colour or
depth image or odometry is older than the watchdog), when the policy has gone quiet, or while the
emergency stop is engaged (latched until released). Time is always an argument (seconds on one monotonic
clock), so the guard is deterministic and needs no ROS. `read_estop_state` / `write_estop_state` keep the
emergency stop's state in a file, so that a guard restarted while it is engaged starts engaged.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from memnav.core.files import replace_files


class GuardReason(Enum):
    """Why the guard sends what it sends (the first that applies, in this order)."""

    ESTOP = "estop"                  # emergency stop engaged: zero
    STALE_COLOR = "stale_color"      # no colour image within watchdog_s: zero
    STALE_DEPTH = "stale_depth"      # no depth image within watchdog_s: zero
    STALE_ODOM = "stale_odom"        # no odometry within watchdog_s: zero
    STALE_COMMAND = "stale_command"  # no policy command within cmd_timeout_s: zero
    LIMITED = "limited"              # the command, clipped by the speed or acceleration limits
    OK = "ok"                        # the command as requested

    @property
    def stops(self) -> bool:
        """Whether this reason forces zero velocity."""
        return self not in (GuardReason.OK, GuardReason.LIMITED)


class Source(Enum):
    """Inputs the watchdog tracks."""

    COLOR = "color"
    DEPTH = "depth"
    ODOM = "odom"


_STALE = {Source.COLOR: GuardReason.STALE_COLOR, Source.DEPTH: GuardReason.STALE_DEPTH,
          Source.ODOM: GuardReason.STALE_ODOM}


@dataclass
class VelocityGuardConfig:
    """Limits and timeouts of the velocity guard.

    Attributes:
        max_linear_mps: largest forward speed sent, m/s.
        max_reverse_mps: largest backward speed sent (0 = never reverse: the camera looks forward), m/s.
        max_angular_radps: largest turn rate sent, either direction, rad/s.
        max_linear_accel_mps2: largest change of linear speed per second while driving normally, m/s^2.
        max_angular_accel_radps2: largest change of turn rate per second while driving normally, rad/s^2.
        watchdog_s: send zero when the newest colour image, depth image or odometry is older than this,
            seconds (a stop for a fault is immediate, not ramped).
        cmd_timeout_s: send zero when the newest policy command is older than this, seconds.
        max_dt_s: a gap between two updates longer than this counts as this long when applying the
            acceleration limits (a stalled control loop must not allow a jump), seconds.
    """

    max_linear_mps: float = 0.5
    max_reverse_mps: float = 0.0
    max_angular_radps: float = 1.0
    max_linear_accel_mps2: float = 0.5
    max_angular_accel_radps2: float = 2.0
    watchdog_s: float = 0.5
    cmd_timeout_s: float = 0.5
    max_dt_s: float = 0.1

    def __post_init__(self) -> None:
        for name in ("max_linear_mps", "max_reverse_mps", "max_angular_radps"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"VelocityGuardConfig.{name} must be finite and >= 0, got {value}")
        for name in ("max_linear_accel_mps2", "max_angular_accel_radps2", "watchdog_s", "cmd_timeout_s",
                     "max_dt_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"VelocityGuardConfig.{name} must be finite and > 0, got {value}")


@dataclass(frozen=True)
class GuardOutput:
    """One guarded command: what to send and why."""

    v_mps: float
    w_radps: float
    reason: GuardReason


def _clip(value: float, lo: float, hi: float) -> float:
    return min(max(value, lo), hi)


class VelocityGuard:
    """Turns the requested twist into the twist to send, given how fresh the inputs are and the e-stop."""

    def __init__(self, *, max_linear_mps: float = 0.5, max_reverse_mps: float = 0.0, max_angular_radps: float = 1.0,
                 max_linear_accel_mps2: float = 0.5, max_angular_accel_radps2: float = 2.0, watchdog_s: float = 0.5,
                 cmd_timeout_s: float = 0.5, max_dt_s: float = 0.1) -> None:
        self.config = VelocityGuardConfig(max_linear_mps, max_reverse_mps, max_angular_radps, max_linear_accel_mps2,
                                          max_angular_accel_radps2, watchdog_s, cmd_timeout_s, max_dt_s)
        self._heard: dict[Source, float | None] = {s: None for s in Source}
        self._cmd: tuple[float, float] = (0.0, 0.0)
        self._cmd_s: float | None = None
        self._estop = False
        self._out = (0.0, 0.0)
        self._last_update_s: float | None = None

    @classmethod
    def from_config(cls, cfg: VelocityGuardConfig) -> VelocityGuard:
        return cls(max_linear_mps=cfg.max_linear_mps, max_reverse_mps=cfg.max_reverse_mps,
                   max_angular_radps=cfg.max_angular_radps, max_linear_accel_mps2=cfg.max_linear_accel_mps2,
                   max_angular_accel_radps2=cfg.max_angular_accel_radps2, watchdog_s=cfg.watchdog_s,
                   cmd_timeout_s=cfg.cmd_timeout_s, max_dt_s=cfg.max_dt_s)

    @property
    def estop(self) -> bool:
        """Whether the emergency stop is engaged."""
        return self._estop

    def set_estop(self, engaged: bool) -> None:
        """Engage (True) or release (False) the emergency stop; it stays as set until set again."""
        self._estop = bool(engaged)

    def heard(self, source: Source, now_s: float) -> None:
        """A valid message from `source` arrived at `now_s` (seconds)."""
        self._heard[source] = now_s

    def age_s(self, source: Source, now_s: float) -> float:
        """Seconds since `source` was last heard (infinity when never)."""
        t = self._heard[source]
        return math.inf if t is None else now_s - t

    def command(self, v_mps: float, w_radps: float, now_s: float) -> None:
        """The policy requests (v m/s, w rad/s) at `now_s`.

        Raises:
            ValueError: a non-finite value (the previous command stays in force until it times out).
        """
        if not (math.isfinite(v_mps) and math.isfinite(w_radps)):
            raise ValueError(f"velocity command must be finite, got v={v_mps} w={w_radps}")
        self._cmd, self._cmd_s = (float(v_mps), float(w_radps)), now_s

    def update(self, now_s: float) -> GuardOutput:
        """The twist to send at `now_s`; call at the control rate.

        Faults (e-stop, a stale input, a silent policy) give zero at once. Otherwise the command is clipped
        to the speed limits and moved from the last output by at most the acceleration limits times the
        time since the last update.
        """
        dt = 0.0 if self._last_update_s is None else _clip(now_s - self._last_update_s, 0.0, self.config.max_dt_s)
        self._last_update_s = now_s
        reason = self._fault(now_s)
        if reason is not None:
            self._out = (0.0, 0.0)
            return GuardOutput(0.0, 0.0, reason)
        c = self.config
        v_req, w_req = self._cmd
        v = _clip(v_req, -c.max_reverse_mps, c.max_linear_mps)
        w = _clip(w_req, -c.max_angular_radps, c.max_angular_radps)
        v_prev, w_prev = self._out
        v = _clip(v, v_prev - c.max_linear_accel_mps2 * dt, v_prev + c.max_linear_accel_mps2 * dt)
        w = _clip(w, w_prev - c.max_angular_accel_radps2 * dt, w_prev + c.max_angular_accel_radps2 * dt)
        self._out = (v, w)
        exact = math.isclose(v, v_req, abs_tol=1e-9) and math.isclose(w, w_req, abs_tol=1e-9)
        return GuardOutput(v, w, GuardReason.OK if exact else GuardReason.LIMITED)

    def _fault(self, now_s: float) -> GuardReason | None:
        if self._estop:
            return GuardReason.ESTOP
        for source in Source:
            if self.age_s(source, now_s) > self.config.watchdog_s:
                return _STALE[source]
        if self._cmd_s is None or now_s - self._cmd_s > self.config.cmd_timeout_s:
            return GuardReason.STALE_COMMAND
        return None


def read_estop_state(path: Path | str) -> tuple[bool, str]:
    """The emergency-stop state kept in `path` by `write_estop_state`, for a guard that (re)starts.

    Fail-safe: a file that exists but cannot be read or understood counts as engaged. A missing file is
    released (nothing was ever engaged there).

    Returns:
        (engaged, why: one line naming the file and what was found, for the log).
    """
    p = Path(path).expanduser()
    if not p.exists():
        return False, f"no emergency-stop state in {p} (released)"
    try:
        body = json.loads(p.read_text())
        engaged = body["engaged"]
        if not isinstance(engaged, bool):
            raise ValueError(f"'engaged' is {engaged!r}, not true or false")
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        return True, f"emergency-stop state {p} is unreadable ({err}): ENGAGED to be safe"
    since = body.get("since_utc", "?")
    return engaged, f"emergency stop {'ENGAGED' if engaged else 'released'} as kept in {p} (since {since})"


def write_estop_state(path: Path | str, engaged: bool, since_utc: str) -> None:
    """Keep the emergency-stop state in `path` (JSON), replacing it atomically and durably (written to a temporary
    file, synced, renamed), so a guard restarted at any moment reads the old or the new state, never half of one.

    Raises:
        OSError: the folder cannot be created or written.
    """
    body = json.dumps({"engaged": bool(engaged), "since_utc": since_utc}) + "\n"
    replace_files({Path(path).expanduser(): body.encode()}, sync=True)
