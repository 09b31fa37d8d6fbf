"""Value-of-information stop controller and its calibrated goal belief.

Belief. `GoalBeliefCalibrator` maps evidence features (cosine similarity between the current and the
goal embedding, geometric verification score, ...) to p = P(goal within the success radius) with a
logistic model fitted on labelled examples from the train houses; `reliability()` gives the data of a
reliability diagram and the expected calibration error.

Decision. With belief p the agent can
- STOP now: expected value  V_stop(p) = p * success_reward;
- act once more and look again: pay `look_cost`, receive a new belief p', then choose the better of
  stopping (V_stop(p')) and searching on (`search_value`, the value of continuing to navigate).
The next belief is uncertain; before seeing it, p' ~ Beta(k p, k (1 - p)) with k = `evidence_strength`
(its mean is p: beliefs are a martingale; larger k = one more view changes the belief less). Then

    V_look(p) = E[max(V_stop(p'), search_value)] - look_cost      (closed form with incomplete betas)
    VoI(p)    = E[max(V_stop(p'), search_value)] - max(V_stop(p), search_value)   (>= 0)

and the controller stops when V_stop(p) >= max(V_look(p), search_value - look_cost): stopping now is
worth at least as much as looking once more (the value of the extra observation minus its cost) and as
moving on. `FixedThresholdStop` (stop when p >= threshold) is the baseline it is compared with.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import numpy as np


class StopReason(Enum):
    """Why the controller decided as it did."""

    CONFIDENT = "confident"              # stopping beats looking again and moving on
    LOOK_AGAIN = "look_again"            # the next observation is worth its cost
    KEEP_SEARCHING = "keep_searching"    # the goal is probably elsewhere
    THRESHOLD = "threshold"              # fixed-threshold baseline fired


@dataclass(frozen=True)
class StopDecision:
    """stop: whether to call STOP; belief: P(goal within radius); voi: value of one more look."""

    stop: bool
    belief: float
    voi: float
    value_stop: float
    value_look: float
    reason: StopReason


@dataclass
class VoIStopConfig:
    """Parameters of the value-of-information stop rule (values in units of the success reward).

    Attributes:
        success_reward: value of stopping within the success radius.
        look_cost: cost of one more action and observation (path length / time), same units.
        search_value: value of continuing to navigate instead of stopping here (e.g. the policy's value
            estimate, or a constant prior).
        evidence_strength: k of the Beta predictive of the next belief; larger = one more view is less
            informative.
    """

    success_reward: float = 1.0
    look_cost: float = 0.02
    search_value: float = 0.3
    evidence_strength: float = 8.0

    def __post_init__(self) -> None:
        for name, strict in (("success_reward", True), ("evidence_strength", True), ("look_cost", False)):
            value = getattr(self, name)
            if not (math.isfinite(value) and (value > 0 if strict else value >= 0)):
                raise ValueError(f"VoIStopConfig.{name} must be a finite number {'>' if strict else '>='} 0, "
                                 f"got {value!r}")
        if not math.isfinite(self.search_value):
            raise ValueError(f"VoIStopConfig.search_value must be a finite number, got {self.search_value!r}")


def expected_max_stop_or_search(p: float, success_reward: float, search_value: float, k: float) -> float:
    """E[max(R p', V)] for p' ~ Beta(k p, k (1 - p)), in closed form."""
    from scipy.special import betainc

    p = min(max(p, 1e-6), 1 - 1e-6)
    a, b = k * p, k * (1.0 - p)
    t = search_value / success_reward
    if t <= 0:
        return success_reward * p
    if t >= 1:
        return search_value
    below = betainc(a, b, t)                         # P(p' < t)
    upper_mean = (a / (a + b)) * (1.0 - betainc(a + 1.0, b, t))   # E[p' ; p' >= t]
    return float(search_value * below + success_reward * upper_mean)


class VoIStopController:
    """Stops when the expected value of stopping is at least that of acting once more and looking again."""

    def __init__(self, success_reward: float = 1.0, look_cost: float = 0.02, search_value: float = 0.3,
                 evidence_strength: float = 8.0) -> None:
        self.config = VoIStopConfig(success_reward, look_cost, search_value, evidence_strength)

    @classmethod
    def from_config(cls, cfg: VoIStopConfig) -> VoIStopController:
        return cls(cfg.success_reward, cfg.look_cost, cfg.search_value, cfg.evidence_strength)

    def decide(self, belief: float, search_value: float | None = None) -> StopDecision:
        """Decide for a calibrated belief in [0, 1] (search_value overrides the configured one)."""
        if not math.isfinite(belief) or not 0.0 <= belief <= 1.0:
            raise ValueError(f"belief must be a probability in [0, 1], got {belief}")
        cfg = self.config
        v_search = cfg.search_value if search_value is None else float(search_value)
        v_stop = belief * cfg.success_reward
        e_next = expected_max_stop_or_search(belief, cfg.success_reward, v_search, cfg.evidence_strength)
        voi = max(0.0, e_next - max(v_stop, v_search))
        v_look = e_next - cfg.look_cost
        if v_stop >= max(v_look, v_search - cfg.look_cost):
            reason, stop = StopReason.CONFIDENT, True
        elif v_look > v_search - cfg.look_cost and voi > cfg.look_cost:
            reason, stop = StopReason.LOOK_AGAIN, False
        else:
            reason, stop = StopReason.KEEP_SEARCHING, False
        return StopDecision(stop, belief, voi, v_stop, v_look, reason)


class FixedThresholdStop:
    """Baseline: stop when the belief reaches a fixed threshold."""

    def __init__(self, threshold: float = 0.5) -> None:
        self.threshold = threshold

    def decide(self, belief: float, search_value: float | None = None) -> StopDecision:
        stop = belief >= self.threshold
        return StopDecision(stop, belief, 0.0, belief, 0.0,
                            StopReason.THRESHOLD if stop else StopReason.KEEP_SEARCHING)


class GoalBeliefCalibrator:
    """Logistic regression from evidence features to P(goal within the success radius)."""

    def __init__(self, weights: np.ndarray | None = None, feature_names: tuple[str, ...] = ("similarity",)) -> None:
        self.feature_names = tuple(feature_names)
        self.weights = np.zeros(len(self.feature_names) + 1) if weights is None else np.asarray(weights, float)

    def predict(self, features: np.ndarray) -> np.ndarray:
        """P(within radius) for (N, F) or (F,) features."""
        x = np.atleast_2d(np.asarray(features, dtype=np.float64))
        if x.shape[1] != len(self.feature_names):
            raise ValueError(f"expected {len(self.feature_names)} features {self.feature_names}, got {x.shape[1]}")
        z = x @ self.weights[:-1] + self.weights[-1]
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))
        return p if np.ndim(features) > 1 else p[:1]

    def fit(self, features: np.ndarray, labels: np.ndarray, l2: float = 1e-3, iters: int = 50) -> GoalBeliefCalibrator:
        """Newton's method on the L2-regularised log-likelihood."""
        x = np.asarray(features, dtype=np.float64)
        y = np.asarray(labels, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] != y.shape[0] or x.shape[1] != len(self.feature_names):
            raise ValueError(f"features must be (N, {len(self.feature_names)}) matching labels (N,)")
        xb = np.hstack([x, np.ones((len(x), 1))])
        w = np.zeros(xb.shape[1])
        for _ in range(iters):
            p = 1.0 / (1.0 + np.exp(-np.clip(xb @ w, -40, 40)))
            grad = xb.T @ (p - y) + l2 * w
            hess = (xb * (p * (1 - p))[:, None]).T @ xb + l2 * np.eye(len(w))
            step = np.linalg.solve(hess, grad)
            w -= step
            if np.abs(step).max() < 1e-8:
                break
        self.weights = w
        return self

    def reliability(self, features: np.ndarray, labels: np.ndarray, bins: int = 10) -> dict:
        """Reliability-diagram data: per-bin mean prediction, observed frequency, count; and the ECE."""
        p = self.predict(features)
        y = np.asarray(labels, dtype=np.float64)
        edges = np.linspace(0, 1, bins + 1)
        idx = np.clip(np.digitize(p, edges) - 1, 0, bins - 1)
        mean_pred, freq, count = [], [], []
        ece = 0.0
        for b in range(bins):
            m = idx == b
            count.append(int(m.sum()))
            mean_pred.append(float(p[m].mean()) if m.any() else math.nan)
            freq.append(float(y[m].mean()) if m.any() else math.nan)
            if m.any():
                ece += m.mean() * abs(p[m].mean() - y[m].mean())
        return {"bin_edges": edges.tolist(), "mean_predicted": mean_pred, "observed_frequency": freq,
                "count": count, "ece": float(ece)}

    def to_dict(self) -> dict:
        return {"feature_names": list(self.feature_names), "weights": self.weights.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> GoalBeliefCalibrator:
        return cls(np.asarray(d["weights"], float), tuple(d["feature_names"]))


# the evidence the shipped stop belief reads: the encoder similarity and the geometric verification score
STOP_FEATURES = ("similarity", "verification")


def load_calibrator(path: Path | str, features: tuple[str, ...] = STOP_FEATURES) -> GoalBeliefCalibrator:
    """The goal-belief calibrator `memnav train stop` wrote to `path`, checked to read `features`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not a calibration JSON, or fitted on other features; the message names the file.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a directory, not a stop calibration JSON")
    if not path.is_file():
        raise FileNotFoundError(f"stop calibration {path} not found (make one with `memnav train stop`)")
    try:
        cal = GoalBeliefCalibrator.from_dict(json.loads(path.read_text()))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        what = f"no {err} field" if isinstance(err, KeyError) else str(err)
        raise ValueError(f"{path}: not a stop calibration JSON (feature_names, weights) of `memnav train stop`: "
                         f"{what}") from None
    if cal.feature_names != tuple(features) or cal.weights.shape != (len(features) + 1,):
        raise ValueError(f"{path}: calibrated on features {cal.feature_names} with {cal.weights.size} weights; "
                         f"this stack computes {tuple(features)}")
    # json reads NaN and Infinity: such a weight made every belief NaN (or a constant), and a NaN belief is
    # refused by VoIStopController.decide at the first decision, long after the file was accepted
    if not np.all(np.isfinite(cal.weights)):
        raise ValueError(f"{path}: weights must be finite numbers, got {cal.weights.tolist()}; fit the calibration "
                         "again with `memnav train stop`")
    return cal


_SHA256_HEX = re.compile(r"[0-9a-f]{8,64}")


@dataclass(frozen=True)
class EncoderCheckpoint:
    """An encoder checkpoint as a stop calibration records it and the encoder node announces it.

    Attributes:
        path: the checkpoint's path as `memnav train stop --checkpoint` was given it, or as the encoder node
            resolved it; None when a calibration does not name it.
        sha256: its identity (`memnav.core.checkpoint.checkpoint_sha256`: leading hex digits of the SHA-256 of
            the file); None when a calibration written before identities were recorded does not name it.
    """

    path: str | None
    sha256: str | None

    def __post_init__(self) -> None:
        if self.sha256 is not None and not (isinstance(self.sha256, str) and _SHA256_HEX.fullmatch(self.sha256)):
            raise ValueError(f"checkpoint sha256 must be 8 to 64 lowercase hex digits, got {self.sha256!r}")
        if self.path is not None and not isinstance(self.path, str):
            raise ValueError(f"checkpoint path must be a string, got {self.path!r}")

    def same_weights(self, other: EncoderCheckpoint) -> bool | None:
        """Whether both name the same checkpoint file contents (one identity may be longer, a prefix of the
        other's); None when either names none."""
        if self.sha256 is None or other.sha256 is None:
            return None
        n = min(len(self.sha256), len(other.sha256))
        return self.sha256[:n] == other.sha256[:n]

    def describe(self) -> str:
        return f"{self.path or '(path not recorded)'} (sha256 {self.sha256 or 'not recorded'})"

    def to_json(self) -> str:
        """The encoder node's announcement: {"checkpoint": path, "sha256": identity}."""
        return json.dumps({"checkpoint": self.path, "sha256": self.sha256})

    @classmethod
    def from_json(cls, text: str) -> EncoderCheckpoint:
        """An announcement of `to_json`; ValueError naming what is wrong with anything else."""
        try:
            body = json.loads(text)
            ckpt = cls(body["checkpoint"], body["sha256"])
        except (ValueError, KeyError, TypeError) as err:
            what = f"no {err} field" if isinstance(err, KeyError) else str(err)
            raise ValueError(f"not an encoder checkpoint announcement {{checkpoint, sha256}}: {what}") from None
        if ckpt.sha256 is None:
            raise ValueError("not an encoder checkpoint announcement: its sha256 is null")
        return ckpt


def calibrated_checkpoint(path: Path | str) -> EncoderCheckpoint:
    """The encoder checkpoint the stop calibration at `path` (`memnav train stop`) was fitted on: its `checkpoint`
    and `checkpoint_sha256` fields, each None when the file has none (older calibrations have no sha256).

    Raises:
        ValueError: the file is not a JSON object, or a field is not what `memnav train stop` writes; the message
            names the file and field.
    """
    try:
        body = json.loads(Path(path).read_text())
    except ValueError as err:
        raise ValueError(f"{path}: not a stop calibration JSON: {err}") from None
    if not isinstance(body, dict):
        raise ValueError(f"{path}: not a stop calibration JSON object")
    try:
        sha = body.get("checkpoint_sha256")
        return EncoderCheckpoint(body.get("checkpoint"), sha.lower() if isinstance(sha, str) else sha)
    except ValueError as err:
        raise ValueError(f"{path}: field checkpoint/checkpoint_sha256: {err}; fit the calibration again with "
                         "`memnav train stop`") from None


def checkpoint_mismatch(calibration: Path | str, calibrated: EncoderCheckpoint, running: EncoderCheckpoint, *,
                        runner: str = "the encoder node runs",
                        give_to: str = "give it to the stop node (parameter calibration)") -> str | None:
    """The warning to give when the encoder runs another checkpoint than the stop calibration at `calibration`
    was fitted on (its similarities are on another scale: the belief stops too early or never), naming both and
    the command that fits a calibration for the running one; None when they agree or either names no sha256.
    `runner` and `give_to` word it for the node that runs the encoder and the one that reads the calibration."""
    if calibrated.same_weights(running) is not False:
        return None
    out = f"stop_calibration_{Path(running.path or 'encoder').stem}.json"
    return (f"stop calibration {calibration} was fitted on encoder checkpoint {calibrated.describe()}, but "
            f"{runner} {running.describe()}: the goal belief is miscalibrated for its embeddings (the "
            f"robot may stop far from the goal, or never). Fit one for it: `memnav train stop --checkpoint "
            f"{running.path} --out {out}`, and {give_to}")


def unchecked_calibration_note(calibration: Path | str, calibrated: EncoderCheckpoint) -> str | None:
    """What to say once when the stop calibration at `calibration` does not name its checkpoint's sha256 (written
    before `memnav train stop` recorded it): no check is possible; None when it names one."""
    if calibrated.sha256 is not None:
        return None
    return (f"stop calibration {calibration} does not name its encoder checkpoint's hash (no checkpoint_sha256; "
            f"fitted on {calibrated.path or 'a checkpoint it does not name'}): whether the encoder node runs that "
            "checkpoint is not checked; `memnav train stop` records it")


def loaded_encoder_mismatch(calibration: Path | str, encoder_checkpoint: Path | str, *, runner: str,
                            give_to: str) -> tuple[bool, str] | None:
    """For a process that loads both the stop calibration and the encoder checkpoint (the policy node): (True, a
    warning, `checkpoint_mismatch` worded with `runner` and `give_to`) when the calibration was fitted on another
    checkpoint (by content, memnav.core.checkpoint.checkpoint_sha256), (False, a note) when the calibration names
    no hash to check (`unchecked_calibration_note`), else None."""
    from memnav.core.checkpoint import checkpoint_sha256

    calibrated = calibrated_checkpoint(calibration)
    note = unchecked_calibration_note(calibration, calibrated)
    if note is not None:
        return False, note
    running = EncoderCheckpoint(str(encoder_checkpoint), checkpoint_sha256(encoder_checkpoint))
    warning = checkpoint_mismatch(calibration, calibrated, running, runner=runner, give_to=give_to)
    return None if warning is None else (True, warning)
