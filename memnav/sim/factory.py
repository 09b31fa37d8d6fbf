"""Pick a simulator backend by name."""
from __future__ import annotations

from pathlib import Path

from memnav.sim.base import SimConfig, Simulator

BACKENDS = ("embedded", "habitat")


def make_simulator(backend: str, config: SimConfig, scene_path: Path | str | None = None) -> Simulator:
    """Build the named backend ("embedded": CPU ray caster, "habitat": habitat-sim, imported lazily).

    Raises:
        ValueError: for an unknown backend name.
        ImportError: (HabitatUnavailableError) when habitat-sim is not installed, saying how to install it.
    """
    if backend == "embedded":
        from memnav.sim.embedded import EmbeddedSimulator

        return EmbeddedSimulator(scene_path, config)
    if backend == "habitat":
        from memnav.sim.habitat import HabitatSimulator

        return HabitatSimulator(config, scene_path)
    raise ValueError(f"unknown simulator backend {backend!r}; expected one of {', '.join(BACKENDS)}")
