#!/usr/bin/env bash
# Runs on a lent GPU machine (device tool: command `bash scripts/device/gpu_tests.sh`, carry [".devcarry"], after
# `bash scripts/device/prepare_tests.sh` here): the encoder-training tests with torch seeing a CUDA device, so that
# every test that trains with the default `--device auto` trains and augments on the GPU. See README.md here.
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devcarry/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/.devcarry/shim:$PWD
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, numba; print('torch', torch.__version__, 'numba', numba.__version__, 'cuda', torch.cuda.is_available())"
timeout 400 python3 -m pytest -p no:cacheprovider -rs --durations=5 ${TESTS:-test/train/test_encoder_train.py} \
  2>&1 | tee "${OUT:-/tmp}/pytest_gpu.txt"
