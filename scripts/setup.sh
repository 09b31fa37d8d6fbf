#!/usr/bin/env bash
# Creates/updates the memnav virtual environment. Safe to re-run.
# usage: scripts/setup.sh PYTHON VENV [TORCH]   (TORCH: cpu, the default, or cuda: see memnav/setup_check.py)
set -euo pipefail
PYTHON=${1:-python3.11}
VENV=${2:-.venv}
TORCH=${3:-cpu}

if [ "$TORCH" != "cpu" ] && [ "$TORCH" != "cuda" ]; then
  echo "memnav setup: TORCH=$TORCH: must be cpu (the default) or cuda (keep a CUDA build of torch for GPU training)" >&2
  exit 1
fi

if ! command -v "$PYTHON" >/dev/null 2>&1; then
  echo "memnav setup: $PYTHON not found; memnav needs Python 3.11 (the torch CPU wheel is built for it)." >&2
  exit 1
fi

# open3d imports only when libusb-1.0 is present.
if ! ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0'; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "memnav setup: installing libusb-1.0-0 (needed by open3d)"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libusb-1.0-0 >/dev/null
  else
    echo "memnav setup: open3d needs libusb-1.0. Install it first, e.g.: sudo apt-get install libusb-1.0-0" >&2
    exit 1
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# A child started from another interpreter must not inherit the ROS wheels' bootstrap marks.
unset _ROS_WHEELS_BOOTSTRAP_COMPLETE || true
LOG="$VENV/setup-pip.log"
# pip prints many harmless "Location ... is ignored" lines: keep them in a log, show it on failure.
"$VENV/bin/python" -m pip install -q --upgrade pip >"$LOG" 2>&1 || true
# torch first and pinned, so that nothing later resolves another build (TORCH=cpu: the CPU one, checked below).
echo "memnav setup: installing torch 2.13.0 ($TORCH), ROS 2 Kilted wheels, open3d and the rest (a few minutes)"
if ! "$VENV/bin/python" -m pip install -q "torch==2.13.0" >>"$LOG" 2>&1; then
  grep -v -E "Location .* is ignored" "$LOG" >&2; echo "memnav setup: installing torch failed (log: $LOG)" >&2; exit 1
fi
if ! "$VENV/bin/python" -m pip install -q -r requirements.txt >>"$LOG" 2>&1; then
  grep -v -E "Location .* is ignored" "$LOG" >&2; echo "memnav setup: pip install failed (full log: $LOG)" >&2; exit 1
fi
if ! "$VENV/bin/python" -m pip install -q --no-deps -e . >>"$LOG" 2>&1; then
  tail -20 "$LOG" >&2; echo "memnav setup: installing memnav itself failed" >&2; exit 1
fi

# Verify the resolved set: the torch build asked for, open3d import, rclpy import.
"$VENV/bin/python" -m memnav.setup_check "$TORCH"
"$VENV/bin/python" - <<'PY'
import open3d  # noqa: F401
import cv2, networkx, rosbags  # noqa: F401,E401
print(f"memnav setup: open3d {open3d.__version__} OK")
PY
"$VENV/bin/python" -c "import rclpy, sensor_msgs.msg, nav_msgs.msg; print('memnav setup: rclpy OK')"
