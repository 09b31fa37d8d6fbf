#!/usr/bin/env bash
# Prepares .devcarry/ (git-ignored) for running the encoder-training tests on a lent GPU machine, where torch sees
# a CUDA device and every test that trains (`--device auto`) trains there: see scripts/device/README.md.
# usage: bash scripts/device/prepare_tests.sh   (from the repo root, after make setup)
set -euo pipefail
PY=.venv/bin/python
OUT=.devcarry
TINY=$OUT/tiny
mkdir -p "$OUT/whl" "$OUT/shim" "$TINY"
PY312=${PY312:-$(ls "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
"$PY312" -m pip wheel -q --no-deps "scikit-fmm==$($PY -c 'import importlib.metadata as m; print(m.version("scikit-fmm"))')" \
  "trimesh==$($PY -c 'import importlib.metadata as m; print(m.version("trimesh"))')" -w "$OUT/whl"
cp scripts/device/shim/sitecustomize.py scripts/device/shim/gridkey.py "$OUT/shim/"
# the tests generate these tiny datasets themselves (test/conftest.py make_tiny_dataset, same seeds): their grids
# are recorded here so that the shim can replay them there
specs=()
for seed in 2 5 6; do
  rm -rf "$TINY/s$seed"
  PYTHONPATH=test "$PY" -c "from pathlib import Path; from conftest import make_tiny_dataset; make_tiny_dataset(Path('$TINY/s$seed'), seed=$seed)"
  for split in train val test; do specs+=("$TINY/s$seed:$split"); done
done
"$PY" scripts/device/record_grids.py "$OUT/shim/grids.npz" "${specs[@]}"
rm -rf "$TINY"
du -sh "$OUT"
