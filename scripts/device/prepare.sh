#!/usr/bin/env bash
# Prepares .devcarry/ (git-ignored) for encoder training on a lent GPU machine: see scripts/device/README.md.
# usage: bash scripts/device/prepare.sh   (from the repo root, after make setup)
set -euo pipefail
PY=.venv/bin/python
OUT=.devcarry
TRAIN_DATA=${TRAIN_DATA:-data/enc96}
VAL_DATA=${VAL_DATA:-data/houses}
mkdir -p "$OUT/whl" "$OUT/shim"
if [ ! -f "$TRAIN_DATA/splits.json" ]; then
  .venv/bin/memnav scenes --out "$TRAIN_DATA" --houses 96 --seed 1 --train-episodes 1 --val-episodes 1 --test-episodes 1
fi
# the houses travel (the 64 MiB limit holds the repo and about 20 MB of compressed scenes)
tar czf "$OUT/data.tgz" "$TRAIN_DATA/scenes" "$TRAIN_DATA/splits.json" "$TRAIN_DATA/episodes" \
  "$VAL_DATA/scenes" "$VAL_DATA/splits.json" "$VAL_DATA/episodes"
# what the GPU image lacks (Python 3.12 there): trimesh, and scikit-fmm, which has no Linux wheel on PyPI
PY312_FOUND=""
for candidate in ${PY312:-} python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
  if "$candidate" -c "" >/dev/null 2>&1; then PY312_FOUND=$candidate; break; fi
done
if [ -z "$PY312_FOUND" ]; then
  echo "prepare: a working python3.12 is needed to build scikit-fmm's wheel for the GPU image (set PY312=...)" >&2; exit 1
fi
PY312=$PY312_FOUND
"$PY312" -m pip wheel -q --no-deps "scikit-fmm==$($PY -c 'import importlib.metadata as m; print(m.version("scikit-fmm"))')" \
  "trimesh==$($PY -c 'import importlib.metadata as m; print(m.version("trimesh"))')" -w "$OUT/whl"
# open3d is not there either: its navigable grids are recorded here and replayed there
cp scripts/device/shim/sitecustomize.py scripts/device/shim/gridkey.py "$OUT/shim/"
"$PY" scripts/device/record_grids.py "$OUT/shim/grids.npz" "$TRAIN_DATA:train" "$VAL_DATA:val"
"$PY" scripts/device/check_render.py save "$OUT/ref.npz" "$TRAIN_DATA:train"
du -sh "$OUT"
