"""make setup's torch check: the CPU build by default, a CUDA build with TORCH=cuda, anything else named."""
import os
import subprocess
import sys
from pathlib import Path

import torch

from memnav.setup_check import TORCH_VERSION, main, torch_build_problem

ROOT = Path(__file__).resolve().parents[1]


def test_the_build_asked_for_passes_and_the_other_says_what_to_do():
    assert torch_build_problem(f"{TORCH_VERSION}+cpu", None, "cpu") is None
    assert torch_build_problem(f"{TORCH_VERSION}+cu130", "13.0", "cuda") is None
    assert torch_build_problem(TORCH_VERSION, "12.8", "cuda") is None   # PyPI's CUDA wheel has no local label
    cuda_for_cpu = torch_build_problem(f"{TORCH_VERSION}+cu130", "13.0", "cpu")
    assert "is a CUDA build (CUDA 13.0)" in cuda_for_cpu and "make setup TORCH=cuda" in cuda_for_cpu
    assert "--index-url https://download.pytorch.org/whl/cpu" in cuda_for_cpu
    cpu_for_cuda = torch_build_problem(f"{TORCH_VERSION}+cpu", None, "cuda")
    assert "is a CPU build, but TORCH=cuda asks for a CUDA one" in cpu_for_cuda
    other = torch_build_problem("2.9.1+cpu", None, "cpu")
    assert "torch 2.9.1+cpu is installed, memnav pins 2.13.0" in other
    assert "must be one of cpu, cuda" in torch_build_problem(f"{TORCH_VERSION}+cpu", None, "gpu")


def test_main_checks_the_installed_torch(capsys):
    wanted = "cuda" if torch.version.cuda is not None else "cpu"
    other = "cpu" if wanted == "cuda" else "cuda"
    assert main([wanted]) == 0
    assert f"memnav setup: torch {torch.__version__} ({wanted} build" in capsys.readouterr().out
    assert main([other]) == 1
    assert "memnav setup: torch" in capsys.readouterr().err
    assert main(["gpu"]) == 1
    assert "TORCH='gpu': must be one of cpu, cuda" in capsys.readouterr().err


def test_make_passes_torch_to_setup_and_setup_refuses_an_unknown_build_before_doing_anything(tmp_path):
    # without the variables of a `make test` this may run under (MAKEFLAGS would pass its overrides on)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    dry = subprocess.run(["make", "-n", "-C", str(ROOT), "setup", "TORCH=cuda", f"VENV={tmp_path / 'venv'}"],
                         capture_output=True, text=True, check=True, env=env).stdout
    assert f'bash scripts/setup.sh "python3.11" "{tmp_path / "venv"}" "cuda"' in dry
    assert ".memnav-setup-stamp-cuda" in dry
    run = subprocess.run(["bash", str(ROOT / "scripts/setup.sh"), sys.executable, str(tmp_path / "venv"), "gpu"],
                         capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 1
    assert "TORCH=gpu: must be cpu (the default) or cuda" in run.stderr
    assert not (tmp_path / "venv").exists()
