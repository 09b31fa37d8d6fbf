"""Geometric verification of an image match: ORB keypoints, Lowe ratio test, RANSAC.

Works on any camera images (no learning involved), so it can confirm a place match on a real robot
where the learned encoder has never been trained.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class VerificationConfig:
    """Parameters of the verifier.

    Attributes:
        max_features: ORB keypoints per image.
        ratio: Lowe ratio test threshold (best / second-best Hamming distance).
        ransac_px: RANSAC threshold for the fundamental matrix (a match's distance from its epipolar line), in
            pixels of the images as matched (after `upscale_to_px` / `max_side_px`), so that it means the same
            share of the view at every image size: 2 is 1 pixel of a 128 x 128 view (matched at 256 x 256) and
            5 of a 640 x 360 one (matched at 256 x 144). Until 2026-11-28 it was 1 pixel of the image's own, which
            held a 640 x 360 frame to 0.4 pixels as matched.
        min_inliers: inliers at which the score saturates to 1.
        upscale_to_px: images whose longer side is shorter than this are upscaled until it is this long, pixels
            (the simulator's 128 x 128 views to 256 x 256; a 192 x 108 one to 256 x 144, the scale a square image
            of its width gets; before, its shorter side was brought to 256, to 455 x 256, and its RGB-D goal
            estimates were wrong more often, README "A camera narrower than the simulator's"). Larger images are
            shrunk by `max_side_px`.
        max_side_px: images whose longer side is longer than this are shrunk (area averaging) until it is this
            long, pixels; 0 = match them as they are. Matched as they are, a 69 deg camera's 640 x 360 frames
            navigated worse than the same views at 192 x 108, more episodes ending at a wrong RGB-D goal
            estimate; shrunk, as well (README "A camera narrower than the simulator's").
    """

    max_features: int = 500
    ratio: float = 0.7
    ransac_px: float = 2.0
    min_inliers: int = 15
    upscale_to_px: int = 256
    max_side_px: int = 256

    def __post_init__(self) -> None:
        for name in ("max_features", "min_inliers", "upscale_to_px"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"VerificationConfig.{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.max_side_px, bool) or not isinstance(self.max_side_px, int) or self.max_side_px < 0 \
                or 0 < self.max_side_px < self.upscale_to_px:
            raise ValueError(f"VerificationConfig.max_side_px must be 0 (off) or an integer >= upscale_to_px "
                             f"({self.upscale_to_px}), got {self.max_side_px!r}")
        if not (math.isfinite(self.ratio) and 0.0 < self.ratio <= 1.0):
            raise ValueError(f"VerificationConfig.ratio must be in (0, 1], got {self.ratio!r}")
        if not (math.isfinite(self.ransac_px) and self.ransac_px > 0):
            raise ValueError(f"VerificationConfig.ransac_px must be a finite number > 0, got {self.ransac_px!r}")


@dataclass
class Features:
    keypoints: np.ndarray      # (N, 2) float32 pixel coordinates, in the image's own pixels
    descriptors: np.ndarray    # (N, 32) uint8 ORB descriptors
    scale: float = 1.0         # pixels as matched per pixel of the image (2 for a 128 x 128 view)


@dataclass
class VerificationResult:
    """score in [0, 1] (inliers / min_inliers, capped), inliers and ratio-test matches."""

    score: float
    inliers: int
    matches: int


def _gray(img: np.ndarray, cfg: VerificationConfig) -> tuple[np.ndarray, float]:
    import cv2

    img = np.asarray(img)
    if img.ndim not in (2, 3) or img.dtype != np.uint8:
        raise ValueError(f"image must be uint8 (H, W) or (H, W, 3), got {img.dtype} {img.shape}")
    gray = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY) if img.ndim == 3 else img
    side = max(gray.shape)
    if side < cfg.upscale_to_px:
        scale = cfg.upscale_to_px / side
        gray = cv2.resize(gray, None, fx=scale, fy=scale, interpolation=cv2.INTER_LINEAR)
    elif cfg.max_side_px and side > cfg.max_side_px:
        scale = cfg.max_side_px / side
        gray = cv2.resize(gray, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    else:
        scale = 1.0
    return gray, scale


def extract_features(img: np.ndarray, cfg: VerificationConfig | None = None) -> Features:
    """ORB keypoints and descriptors of an image (cache them to verify against many candidates)."""
    import cv2

    cfg = cfg or VerificationConfig()
    gray, scale = _gray(img, cfg)
    orb = cv2.ORB_create(nfeatures=cfg.max_features, fastThreshold=5, edgeThreshold=15, patchSize=15)
    kps, desc = orb.detectAndCompute(gray, None)
    if desc is None or not kps:
        return Features(np.zeros((0, 2), np.float32), np.zeros((0, 32), np.uint8), scale)
    pts = np.array([k.pt for k in kps], dtype=np.float32) / scale
    return Features(pts, desc, scale)


def match_features(a: Features, b: Features, cfg: VerificationConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Ratio-test matches from a to b: matched pixel coordinates (M, 2) in a and in b (empty when too few)."""
    import cv2

    cfg = cfg or VerificationConfig()
    empty = np.zeros((0, 2), np.float32)
    if len(a.descriptors) < 8 or len(b.descriptors) < 8:
        return empty, empty
    matcher = cv2.BFMatcher(cv2.NORM_HAMMING)
    pairs = matcher.knnMatch(a.descriptors, b.descriptors, k=2)
    good = [p[0] for p in pairs if len(p) == 2 and p[0].distance < cfg.ratio * p[1].distance]
    if not good:
        return empty, empty
    return a.keypoints[[m.queryIdx for m in good]], b.keypoints[[m.trainIdx for m in good]]


def verify_features(a: Features, b: Features, cfg: VerificationConfig | None = None,
                    matches: tuple[np.ndarray, np.ndarray] | None = None) -> VerificationResult:
    """Score how well two feature sets agree on one rigid scene (epipolar geometry).

    `matches`: the a -> b ratio-test matches when the caller has them already (`match_features`).
    """
    import cv2

    cfg = cfg or VerificationConfig()
    pa, pb = matches if matches is not None else match_features(a, b, cfg)
    if len(pa) < 8:
        return VerificationResult(0.0, 0, len(pa))
    # the threshold in the images' own pixels (their scales' geometric mean where the two were matched at two)
    threshold = cfg.ransac_px / math.sqrt(a.scale * b.scale)
    fundamental, mask = cv2.findFundamentalMat(pa, pb, cv2.FM_RANSAC, threshold, 0.99)
    # no model found: OpenCV (5.0) then hands back a mask it never filled in, whose bytes are whatever the memory
    # held (a pair of two different rooms once summed to 2,584 "inliers" of 24 matches); it holds no inliers
    found = fundamental is not None and fundamental.size > 0 and mask is not None
    inliers = int(np.count_nonzero(mask)) if found else 0
    return VerificationResult(min(1.0, inliers / cfg.min_inliers), inliers, len(pa))


def verify_pair(img_a: np.ndarray, img_b: np.ndarray, cfg: VerificationConfig | None = None) -> VerificationResult:
    """Geometric verification score that two images show the same place."""
    cfg = cfg or VerificationConfig()
    return verify_features(extract_features(img_a, cfg), extract_features(img_b, cfg), cfg)
