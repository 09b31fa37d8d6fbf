#!/bin/bash
# A robot's first goals, rehearsed on the simulator: the bridge stands in for the robot in real time (it moves by
# /cmd_vel alone; its own goal and judge are moved off the memnav topics), a real-time policy node drives it.
#   memnav check -> memnav goal capture here.png (at the start) -> memnav goal send GOAL.png here.png --wait
# (go to the episode's goal view, then come back to where the capture was taken).
# Usage: scripts/rehearse_goal_tour.sh OUT_DIR [EPISODE_INDEX] [lifelong]   (from the repository root)
# "lifelong" keeps the long-term memory across the two goals (policy_node lifelong_dir), so the way back is known.
set -euo pipefail
OUT=${1:?usage: $0 OUT_DIR [EPISODE_INDEX] [lifelong]}; I=${2:-0}; LIFE=${3:-}
PY=$(pwd)/.venv/bin/python; M=$(pwd)/.venv/bin/memnav; DATA=$(pwd)/data/houses
mkdir -p "$OUT"; cd "$OUT"
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-81} ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
EP=$($PY -c "from pathlib import Path; from memnav.sim.episodes import load_episodes; print(load_episodes(Path('$DATA'), 'test')[$I].episode_id)")
$PY "$OLDPWD/scripts/episode_goal_photo.py" "$EP" goal.png --data "$DATA"
MEM=(); [ "$LIFE" = lifelong ] && MEM=(-p lifelong_dir:="$(pwd)/mem" -p memory_key:=rehearsal -p odometry_persists:=true)
$PY -m memnav.ros.sim_bridge_node --ros-args -p data:="$DATA" -p split:=test -p first_episode:="$I" -p lockstep:=false \
    -p rate_hz:=10.0 -p auto_next:=false -p sim.max_episode_steps:=100000 -r /memnav/goal_image:=/sim/goal_image \
    -r /memnav/goal_depth:=/sim/goal_depth -r /memnav/action:=/sim/action > bridge.log 2>&1 &
B=$!
$PY -m memnav.ros.policy_node --ros-args -p lockstep:=false -p action_duration_s:=0.25 -p collision_fraction:=0.4 \
    "${MEM[@]}" > policy.log 2>&1 &
P=$!
trap 'kill -INT $B $P 2>/dev/null; wait' EXIT
sleep 5
$M check --color-topic /camera/color/image_raw --depth-topic /camera/depth/image_raw --duration 3 || true
$M goal capture here.png --overwrite --color-topic /camera/color/image_raw --depth-topic /camera/depth/image_raw
$M goal send goal.png here.png --wait --timeout 300 --json tour.json --no-progress
