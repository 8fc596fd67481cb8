#!/usr/bin/env bash
# How long does `make setup` take on a fresh clone: uv (the default) against pip?
#
# Clones this checkout twice into a temporary folder and runs `make setup` in each,
# pip first (UV=pip), then uv, with every download cache off (PIP_NO_CACHE_DIR=1,
# UV_NO_CACHE=1), as on a machine that has never installed anything. Prints the two
# times, their ratio, and whether both virtual environments hold the same packages
# (pip itself and uv aside).
#
#   bash bench/setup_time.sh
#
# The last line is for a script to read:
#   RESULT setup pip <s>s uv <s>s ratio <x>x same-packages <yes|no>
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="$(mktemp -d /tmp/grpo-setup-time-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

declare -A SECONDS_TAKEN
for tool in pip uv; do
  git clone --quiet "$ROOT" "$WORK/$tool"
  start=$(date +%s.%N)
  PIP_NO_CACHE_DIR=1 UV_NO_CACHE=1 make -C "$WORK/$tool" setup UV="$tool" \
    >"$WORK/$tool.log" 2>&1 || { tail -20 "$WORK/$tool.log"; exit 1; }
  end=$(date +%s.%N)
  SECONDS_TAKEN[$tool]=$(python3 -c "print(f'{$end - $start:.0f}')")
  echo "make setup with $tool: ${SECONDS_TAKEN[$tool]} s"
  "$WORK/$tool/.venv/bin/python" -m pip list --format=freeze 2>/dev/null \
    | grep -viE '^(pip|uv)==' | sort >"$WORK/$tool.packages"
done

same=no
cmp -s "$WORK/pip.packages" "$WORK/uv.packages" && same=yes
[ "$same" = yes ] || diff "$WORK/pip.packages" "$WORK/uv.packages" || true
ratio=$(python3 -c "print(f'{${SECONDS_TAKEN[pip]} / ${SECONDS_TAKEN[uv]}:.1f}')")
echo "RESULT setup pip ${SECONDS_TAKEN[pip]}s uv ${SECONDS_TAKEN[uv]}s" \
  "ratio ${ratio}x same-packages $same"
