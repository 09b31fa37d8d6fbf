"""What `make setup` checks of the torch build in the virtual environment.

`make setup` installs torch 2.13.0. By default (`TORCH=cpu`) it must be the CPU build, which runs everything
memnav ships and keeps the environment small; `make setup TORCH=cuda` keeps a CUDA build instead, for training
on a GPU (`memnav train encoder --device cuda`). On Linux x86_64, PyPI's `torch==2.13.0` is the CUDA build, so
on a machine without a local CPU wheel the default setup stops here and says which of the two to choose.

`python -m memnav.setup_check cpu|cuda` prints one line and exits 0 when the installed build is the one asked
for, 1 (naming what to do) when it is not. Pure logic in `torch_build_problem`; torch is imported only by `main`.
"""
from __future__ import annotations

import sys

TORCH_VERSION = "2.13.0"
TORCH_BUILDS = ("cpu", "cuda")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def torch_build_problem(version: str, cuda: str | None, wanted: str) -> str | None:
    """Why the installed torch is not what `make setup TORCH=wanted` asks for; None when it is.

    Args:
        version: `torch.__version__`, e.g. "2.13.0+cpu" or "2.13.0+cu130".
        cuda: `torch.version.cuda` (None for a CPU build).
        wanted: "cpu" or "cuda".
    """
    if wanted not in TORCH_BUILDS:
        return f"TORCH={wanted!r}: must be one of {', '.join(TORCH_BUILDS)}"
    base = version.split("+", 1)[0]
    if base != TORCH_VERSION:
        return (f"torch {version} is installed, memnav pins {TORCH_VERSION}: "
                f".venv/bin/pip install --force-reinstall torch=={TORCH_VERSION}, then make setup again")
    if wanted == "cpu" and cuda is not None:
        return (f"torch {version} is a CUDA build (CUDA {cuda}), but make setup installs the CPU build unless "
                f"asked: keep it with `make setup TORCH=cuda`, or replace it with the CPU wheel "
                f"(`.venv/bin/pip install --force-reinstall torch=={TORCH_VERSION} --index-url {CPU_INDEX}`) "
                f"and run make setup again")
    if wanted == "cuda" and cuda is None:
        return (f"torch {version} is a CPU build, but TORCH=cuda asks for a CUDA one: "
                f"`.venv/bin/pip install --force-reinstall torch=={TORCH_VERSION}` (PyPI's Linux x86_64 wheel is "
                f"the CUDA build), then make setup TORCH=cuda again")
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    wanted = args[0] if args else "cpu"
    if wanted not in TORCH_BUILDS:   # before importing torch: a typo needs no torch to be named
        print(f"memnav setup: {torch_build_problem('', None, wanted)}", file=sys.stderr)
        return 1
    import torch

    problem = torch_build_problem(torch.__version__, torch.version.cuda, wanted)
    if problem is not None:
        print(f"memnav setup: {problem}", file=sys.stderr)
        return 1
    where = ""
    if wanted == "cuda":
        where = (f", sees {torch.cuda.get_device_name(0)}" if torch.cuda.is_available()
                 else ", sees no GPU on this machine (training falls back to --device cpu)")
    print(f"memnav setup: torch {torch.__version__} ({wanted} build{where}) OK")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
