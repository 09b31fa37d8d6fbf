#!/usr/bin/env bash
# Runs on a lent GPU machine (device tool: command `bash scripts/device/encoder_runs.sh`, carry [".devcarry"]):
# installs the carried wheels, unpacks the houses, checks rendering against this machine's, runs the CUDA tests,
# renders the training bank once, then trains every run of RUNS_FILE side by side on the one GPU and packs each
# run's checkpoint and curves into $OUT. See scripts/device/README.md.
set -uo pipefail
export PYTHONUNBUFFERED=1
RUNS_FILE=${RUNS_FILE:-scripts/device/encoder_runs.txt}
MM=${MM:-5.8}                     # minutes each run trains before it stops cleanly (its state comes back)
T0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .devcarry/whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/.devcarry/shim:$PWD
tar xzf .devcarry/data.tgz || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, numba; print('torch', torch.__version__, 'numba', numba.__version__, 'cuda', torch.cuda.is_available())"
python3 scripts/device/check_render.py compare .devcarry/ref.npz "${TRAIN_DATA:-data/enc96}:train"
(timeout 200 python3 -m pytest -q -p no:cacheprovider test/train/test_encoder_train.py -k "resolve_device or gpu" \
  > "$OUT/pytest_cuda.txt" 2>&1; echo "pytest rc $?" >> "$OUT/pytest_cuda.txt") &
PT=$!
COMMON=$(head -1 "$RUNS_FILE")
python3 -m memnav.cli train encoder --out /tmp/warm/encoder.pt --steps 1 $COMMON || exit 1
echo "bank ready at $(( $(date +%s) - T0 )) s"
names=()
declare -A steps
while read -r name opts; do
  [ -z "$name" ] && continue
  mkdir -p "runs/$name"
  python3 -m memnav.cli train encoder --out "runs/$name/encoder.pt" $opts --max-minutes "$MM" $COMMON \
    > "runs/$name/log.txt" 2>&1 &
  names+=("$name")
  steps[$name]=$(echo "$opts" | sed -n 's/.*--steps \([0-9]*\).*/\1/p')
done < <(tail -n +2 "$RUNS_FILE")
sleep 60; nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
wait $PT; tail -3 "$OUT/pytest_cuda.txt"
wait
echo "trained at $(( $(date +%s) - T0 )) s"
for name in "${names[@]}"; do
  d=runs/$name
  python3 -c "import json; c = json.load(open('$d/encoder.curve.json')); print('$name', c['step'][-1], [(s, round(v, 3)) for s, v in zip(c['val_step'], c['val_recall_at_1'])])"
  tail -c 300 "$d/log.txt"; echo
  tar czf "$OUT/$name.tgz" -C "$d" encoder.pt encoder.curve.json encoder.curve.png log.txt
  # a run the time limit stopped brings its state back, to be resumed (on a GPU, or here)
  python3 -c "import json, sys; sys.exit(json.load(open('$d/encoder.curve.json'))['step'][-1] < ${steps[$name]:-0})" \
    || cp "$d/encoder.pt.state" "$OUT/$name.state.pt"
done
ls -la "$OUT"
