#!/usr/bin/env bash
# How much does `make setup` download on a machine that has never installed anything?
#
# Takes the packages of a virtual environment (VENV, default this checkout's `.venv`:
# what `make setup` or `make setup-all` installed, torch and the project itself
# aside), downloads each one's
# file from the package index into a temporary folder with the download cache off,
# and adds the size of torch's CPU wheel (from the local wheel folder WHEELS, default
# /opt/wheels, where it exists). Prints the sizes and how long the downloads took
# over this machine's link; a laptop's link sets its own time.
#
#   make setup && bash bench/setup_download.sh
#   make setup VENV=/tmp/learner && VENV=/tmp/learner bash bench/setup_download.sh
#
# The last line is for a script to read:
#   RESULT download packages <n> <MB>MB torch <MB>MB total <MB>MB seconds <s>
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
WHEELS="${WHEELS:-/opt/wheels}"
[ -x "$PY" ] || { echo "no $VENV: run make setup first" >&2; exit 2; }
WORK="$(mktemp -d /tmp/grpo-setup-download-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

# uv (what make setup uses) lists the environment; pip freeze where uv is absent.
if [ -x "$VENV/bin/uv" ]; then
  "$VENV/bin/uv" pip freeze --python "$PY"
else
  "$PY" -m pip freeze
fi | grep -v -E '^-e |^grpo-notebooks|^torch==' >"$WORK/packages.txt"

start=$(date +%s.%N)
PIP_NO_CACHE_DIR=1 "$PY" -m pip download --quiet --no-deps --no-build-isolation \
  -d "$WORK/files" -r "$WORK/packages.txt" >"$WORK/pip.log" 2>&1 \
  || { grep -v WARNING "$WORK/pip.log" | tail -20; exit 1; }
end=$(date +%s.%N)

torch_version=$("$PY" -c "import torch; print(torch.__version__)")
torch_bytes=0
for wheel in "$WHEELS"/torch-"${torch_version}"-*.whl; do
  [ -f "$wheel" ] && torch_bytes=$(stat -c %s "$wheel")
done

"$PY" - "$WORK/files" "$torch_bytes" "$torch_version" "$start" "$end" <<'EOF'
import sys
from pathlib import Path

files = sorted(Path(sys.argv[1]).iterdir(), key=lambda p: -p.stat().st_size)
torch_bytes, torch_version = int(sys.argv[2]), sys.argv[3]
seconds = float(sys.argv[5]) - float(sys.argv[4])
mb = sum(p.stat().st_size for p in files) / 1e6
print(f"{len(files)} packages besides torch: {mb:.0f} MB in {seconds:.0f} s; largest:")
for p in files[:5]:
    print(f"  {p.stat().st_size / 1e6:6.1f} MB  {p.name}")
torch_mb = torch_bytes / 1e6
print(f"torch {torch_version}: {torch_mb:.0f} MB" if torch_bytes else
      f"torch {torch_version}: no wheel in the local folder, not counted")
print(f"RESULT download packages {len(files)} {mb:.0f}MB torch {torch_mb:.0f}MB "
      f"total {mb + torch_mb:.0f}MB seconds {seconds:.0f}")
EOF
