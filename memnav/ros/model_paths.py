"""Model files named by node parameters (kept for imports; the logic lives in memnav.paths)."""
from __future__ import annotations

from memnav.paths import MODELS, PACKAGE_ROOT, resolve_model_path

__all__ = ["MODELS", "PACKAGE_ROOT", "resolve_model_path"]
