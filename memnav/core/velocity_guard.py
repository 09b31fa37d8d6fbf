"""Velocity guard: the last check between the policy's velocity command and the robot's base.

It limits speed and acceleration, and commands zero when the robot is driving blind (the newest colour or
depth image or odometry is older than the watchdog), when the policy has gone quiet, or while the
emergency stop is engaged (latched until released). With `stop_distance_m` set it also holds forward speed at
zero while the newest depth image shows a surface in the robot's path nearer than that (`nearest_ahead_m`): a
bumper made of the camera; turning on the spot still passes. Time is always an argument (seconds on one monotonic
clock), so the guard is deterministic and needs no ROS. `read_estop_state` / `write_estop_state` keep the
emergency stop's state in a file, so that a guard restarted while it is engaged starts engaged.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np

from memnav.core.files import replace_files
from memnav.core.frames import level_points, pixel_ray_offsets


class GuardReason(Enum):
    """Why the guard sends what it sends (the first that applies, in this order)."""

    ESTOP = "estop"                  # emergency stop engaged: zero
    STALE_COLOR = "stale_color"      # no colour image within watchdog_s: zero
    STALE_DEPTH = "stale_depth"      # no depth image within watchdog_s: zero
    STALE_ODOM = "stale_odom"        # no odometry within watchdog_s: zero
    STALE_COMMAND = "stale_command"  # no policy command within cmd_timeout_s: zero
    OBSTACLE = "obstacle_ahead"      # a surface in the robot's path nearer than stop_distance_m, or none measured
                                     # yet: forward speed zero; turns and reversing pass within the limits
    LIMITED = "limited"              # the command, clipped by the speed or acceleration limits
    OK = "ok"                        # the command as requested

    @property
    def stops(self) -> bool:
        """Whether this reason forces zero velocity (an obstacle ahead forces zero forward speed only)."""
        return self not in (GuardReason.OK, GuardReason.LIMITED, GuardReason.OBSTACLE)


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
        stop_distance_m: hold forward speed at zero while the newest depth image shows a surface in the robot's
            path nearer than this to the camera (`nearest_ahead_m`; until a depth image has been measured, too),
            meters; 0 = off. A depth camera reads nothing inside its minimum range (a RealSense D435 about 0.2-0.3
            m), so keep this above it: a wall that close reads as no return (see max_blind_share), unless the
            driver marks it too near to measure (-inf in 32FC1, REP 117), which holds forward at once (0 m).
        corridor_half_width_m: the robot's path is this far left and right of the camera's optical axis, meters
            (half the robot's width plus a margin).
        max_blind_share: with stop_distance_m set, forward is held too while more than this share of the middle
            third of the depth image (its columns) reads no return (`blind_share`): a depth camera reads nothing
            of a surface inside its minimum range, so a wall the robot was turned against looks like open space.
            1 = never.
    """

    max_linear_mps: float = 0.5
    max_reverse_mps: float = 0.0
    max_angular_radps: float = 1.0
    max_linear_accel_mps2: float = 0.5
    max_angular_accel_radps2: float = 2.0
    watchdog_s: float = 0.5
    cmd_timeout_s: float = 0.5
    max_dt_s: float = 0.1
    stop_distance_m: float = 0.0
    corridor_half_width_m: float = 0.25
    max_blind_share: float = 0.5

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
        if not (math.isfinite(self.stop_distance_m) and 0.0 <= self.stop_distance_m <= MAX_STOP_DISTANCE_M):
            raise ValueError(f"VelocityGuardConfig.stop_distance_m must be in [0, {MAX_STOP_DISTANCE_M:g}] m "
                             f"(0 = off), got {self.stop_distance_m}")
        if not (math.isfinite(self.corridor_half_width_m) and 0.0 < self.corridor_half_width_m <= 2.0):
            raise ValueError(f"VelocityGuardConfig.corridor_half_width_m must be in (0, 2] m, got "
                             f"{self.corridor_half_width_m}")
        if not (math.isfinite(self.max_blind_share) and 0.0 <= self.max_blind_share <= 1.0):
            raise ValueError(f"VelocityGuardConfig.max_blind_share must be in [0, 1] (1 = never), got "
                             f"{self.max_blind_share}")


MAX_STOP_DISTANCE_M = 5.0
OBSTACLE_MIN_HEIGHT_M = 0.1   # points lower than this above the floor are floor (as the occupancy map's)
OBSTACLE_MAX_HEIGHT_M = 1.6   # ... higher than this pass over the robot


def blind_share(depth: np.ndarray) -> float:
    """The share of the middle third of a depth image (its columns, every row) with no return: 0, NaN or
    infinite (-inf, too near to measure, counts here too; `nearest_ahead_m` reads it as 0 m). 1 for an empty
    image."""
    d = np.asarray(depth)
    if d.ndim != 2 or d.size == 0:
        return 1.0
    w = d.shape[1]
    middle = d[:, w // 3: w - w // 3] if w >= 3 else d
    with np.errstate(invalid="ignore"):
        return float(1.0 - (np.isfinite(middle) & (middle > 0)).mean())


_F32_MAX = float(np.finfo(np.float32).max)
_F32_MIN_POSITIVE = float(np.nextafter(np.float32(0.0), np.float32(1.0)))


@functools.lru_cache(maxsize=8)    # the same camera frame after frame
def _path_depth_bounds(width: int, height: int, hfov_deg: float, camera_height_m: float, half_width_m: float,
                       pitch_deg: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For `nearest_ahead_m`: a pixel's point (`level_points`) is its depth times its ray's offsets, so whether it
    lies in the robot's path is a range of depths, per row (height above the floor) and per column (distance left
    or right). Returns (ahead per meter of depth, float64 per row; least and greatest depth in the path, float32
    per row; greatest depth within the path's width, float32 per column), the bounds finite and the least > 0,
    so that 0, NaN and +-inf fall outside."""
    left, up = pixel_ray_offsets(np.arange(width), np.arange(height), width, height, hfov_deg)
    ahead, _, rise = level_points(np.ones(height), np.zeros(height), up, pitch_deg)   # per meter of depth
    in_band = OBSTACLE_MIN_HEIGHT_M <= camera_height_m <= OBSTACLE_MAX_HEIGHT_M
    with np.errstate(divide="ignore", invalid="ignore"):
        to_min = (OBSTACLE_MIN_HEIGHT_M - camera_height_m) / rise
        to_max = (OBSTACLE_MAX_HEIGHT_M - camera_height_m) / rise
        widest = half_width_m / np.abs(left)
    level = rise == 0.0    # a level ray stays at the camera's height: all of it in the band or none
    lo = np.where(level, -math.inf if in_band else math.inf, np.minimum(to_min, to_max))
    hi = np.where(level, math.inf if in_band else -math.inf, np.maximum(to_min, to_max))
    lo = np.maximum(lo, _F32_MIN_POSITIVE).astype(np.float32)
    hi = np.minimum(hi, _F32_MAX).astype(np.float32)
    widest = np.minimum(np.where(left == 0.0, math.inf, widest), _F32_MAX).astype(np.float32)
    bounds = (np.asarray(ahead, dtype=np.float64), lo, hi, widest)
    for array in bounds:
        array.flags.writeable = False      # shared by every call with the same arguments
    return bounds


def nearest_ahead_m(depth: np.ndarray, hfov_deg: float, camera_height_m: float, half_width_m: float,
                    pitch_deg: float = 0.0) -> float:
    """The nearest surface in the robot's path in a depth image (z-depth in meters along the optical axis,
    pitched `pitch_deg` down from level): the least distance ahead over every pixel whose point lies within
    `half_width_m` left or right of the camera and between OBSTACLE_MIN_HEIGHT_M and OBSTACLE_MAX_HEIGHT_M above
    the floor, the camera `camera_height_m` above it (every pixel: a chair leg one pixel wide counts).

    Readings follow REP 117: 0, NaN and +inf are no return (nothing measured: they do not count); -inf is "too
    near to measure", a surface inside the sensor's minimum range, and reads 0 m wherever it lies in the image
    (its distance, and so its place, cannot be told, and it is at the robot whichever way the pixel looks).
    inf when no point is in the path; 0 for a point at or behind the camera's vertical plane too (a wide camera
    pitched far down or up sees under or over itself: such a surface is as near as can be, and holds forward
    motion).

    Raises:
        ValueError: an image that is not 2-D, a field of view outside (0, 180) degrees or a height <= 0.
    """
    d = np.asarray(depth, dtype=np.float32)
    if d.ndim != 2 or d.size == 0:
        raise ValueError(f"depth must be a 2-D image, got shape {d.shape}")
    if not (0.0 < hfov_deg < 180.0) or not (camera_height_m > 0.0):
        raise ValueError(f"hfov_deg must be in (0, 180) and camera_height_m > 0, got {hfov_deg}, {camera_height_m}")
    if (d == -np.inf).any():
        return 0.0
    h, w = d.shape
    ahead, lo, hi, widest = _path_depth_bounds(w, h, float(hfov_deg), float(camera_height_m), float(half_width_m),
                                               float(pitch_deg))
    # comparisons only, no points computed (as many as the image has pixels); NaN compares false
    inside = np.greater_equal(d, lo[:, None])
    inside &= np.less_equal(d, hi[:, None])
    inside &= np.less_equal(d, widest)
    row_min = np.where(inside, d, np.float32(np.inf)).min(axis=1)
    seen = np.isfinite(row_min)
    if not seen.any():
        return math.inf
    return max(0.0, float((ahead[seen] * row_min[seen]).min()))


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

    def __init__(self, **limits: float) -> None:
        """`limits`: fields of VelocityGuardConfig by name (the others keep their defaults)."""
        self.config = VelocityGuardConfig(**limits)
        self._heard: dict[Source, float | None] = {s: None for s in Source}
        self._cmd: tuple[float, float] = (0.0, 0.0)
        self._cmd_s: float | None = None
        self._estop = False
        self._out = (0.0, 0.0)
        self._last_update_s: float | None = None
        self._ahead_m: float | None = None     # the newest depth image's nearest surface in the path (None: none yet)
        self._blind = 0.0                      # ... and its share of no return in the middle (blind_share)

    @classmethod
    def from_config(cls, cfg: VelocityGuardConfig) -> VelocityGuard:
        return cls(**dataclasses.asdict(cfg))

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

    @property
    def ahead_m(self) -> float | None:
        """The nearest surface in the robot's path in the newest depth image measured (inf: none; None: no image
        measured yet)."""
        return self._ahead_m

    @property
    def blind(self) -> float:
        """The newest depth image's share of no return in the middle of its view (`blind_share`)."""
        return self._blind

    def obstacle(self, distance_m: float | None, blind: float = 0.0) -> None:
        """The newest depth image's nearest surface in the robot's path (`nearest_ahead_m`; inf: none; None:
        forget it, nothing measured) and its share of no return in the middle of the view (`blind_share`). Its
        freshness is the depth image's: the watchdog stops the robot when depth goes stale."""
        if distance_m is not None and (math.isnan(distance_m) or distance_m < 0):
            raise ValueError(f"obstacle distance must be >= 0 m or inf, got {distance_m}")
        if not 0.0 <= blind <= 1.0:
            raise ValueError(f"blind share must be in [0, 1], got {blind}")
        self._ahead_m = None if distance_m is None else float(distance_m)
        self._blind = float(blind)

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
        time since the last update; forward speed drops to zero at once while an obstacle is ahead
        (`stop_distance_m`).
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
        held = v > 0.0 and self.obstacle_ahead
        if held:
            v = 0.0
        self._out = (v, w)
        exact = math.isclose(v, v_req, abs_tol=1e-9) and math.isclose(w, w_req, abs_tol=1e-9)
        return GuardOutput(v, w, GuardReason.OBSTACLE if held else GuardReason.OK if exact else GuardReason.LIMITED)

    @property
    def obstacle_ahead(self) -> bool:
        """Whether forward motion is held: stop_distance_m is set and the newest depth image measured shows a
        surface in the path nearer than it or no return in more than max_blind_share of its middle, or none has
        been measured yet."""
        d = self.config.stop_distance_m
        return d > 0.0 and (self._ahead_m is None or self._ahead_m < d or self._blind > self.config.max_blind_share)

    def _fault(self, now_s: float) -> GuardReason | None:
        if self._estop:
            return GuardReason.ESTOP
        for source in Source:
            if self.age_s(source, now_s) > self.config.watchdog_s:
                return _STALE[source]
        if self._cmd_s is None or now_s - self._cmd_s > self.config.cmd_timeout_s:
            return GuardReason.STALE_COMMAND
        return None


class EstopInbox:
    """Which emergency-stop messages to act on, for a node that subscribes the e-stop reliable, best effort and
    transient local, so that every kind of publisher reaches it.

    Messages heard on the reliable and best-effort subscriptions are all acted on, as they come: the copies of one
    reliable publisher's message arrive on both, and the last copy taken restores the newest state even where
    another publisher's message came in between. The transient-local subscription is the only one that hears what
    a latched publisher sent before this node heard it (its state while the node was down, respawning, or before
    discovery matched them); a stop heard there engages, but a release never does: a stop kept across the node's
    restart (`read_estop_state`), or engaged by another publisher since, is newer than it (the live release reaches
    the other subscriptions). Nor does a stop heard there that the others already had, from the same publisher,
    together with something newer of it: taken late, it would undo that publisher's release.
    """

    MAX_PUBLISHERS = 1024     # publishers remembered (each `memnav estop` is a new one); the oldest is forgotten

    def __init__(self) -> None:
        self._newest: dict[bytes, int] = {}    # per publisher, the newest sequence number heard live

    def take(self, engaged: bool, publisher: bytes | None = None, sequence: int | None = None,
             latched: bool = False) -> bool:
        """Whether to act on an e-stop message: `engaged` (its data), from `publisher` (its GID) with its
        publication `sequence` number (None: unknown), heard on the transient-local subscription (`latched`) or
        on another."""
        known = publisher is not None and sequence is not None
        if not latched:
            if known and sequence > self._newest.get(publisher, 0):
                self._newest.pop(publisher, None)
                self._newest[publisher] = sequence
                if len(self._newest) > self.MAX_PUBLISHERS:
                    del self._newest[next(iter(self._newest))]
            return True
        return engaged and not (known and sequence <= self._newest.get(publisher, 0))


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
