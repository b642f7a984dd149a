#!/usr/bin/env bash
# Drive the real app in a real terminal (tmux) at 80x24 and print what each stage shows.
#
# Usage: tests/tmux_drive.sh [MODEL.gguf] [OUT_DIR]
#   MODEL defaults to the bundled tiny model; OUT_DIR (default: a temp dir) gets one
#   text capture per stage (NN-stage.txt). Set NO_COLOR=1 or TERM=xterm (16 colours)
#   in the environment to check those terminals too: the variables reach the app.
# Keys sent: the stage number, then for the stepping stages space (one pass), enter
# (play) and a pause; on sampling T T (temperature up); q at the end.
set -euo pipefail

model=${1:-}
out=${2:-$(mktemp -d)}
session=walkthrough-drive-$$
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-$(command -v python)}
mkdir -p "$out"

cleanup() { tmux kill-session -t "$session" 2>/dev/null || true; }
trap cleanup EXIT

tmux new-session -d -s "$session" -x 80 -y 24 \
  "cd '$root' && NO_COLOR='${NO_COLOR:-}' TERM='${TERM:-xterm-256color}' '$python' -m walkthrough $model; sleep 2"

capture() {  # capture NAME: wait for the screen to settle, save the pane as text
  sleep "${PAUSE:-1.5}"
  tmux capture-pane -p -t "$session" > "$out/$1.txt"
  echo "== $1"; cat "$out/$1.txt"
}

sleep 2
capture 1-file
tmux send-keys -t "$session" v; capture 1-file-tensors
tmux send-keys -t "$session" 2; capture 2-template
tmux send-keys -t "$session" 3; capture 3-tokens
tmux send-keys -t "$session" 4 Space; capture 4-prefill
tmux send-keys -t "$session" 5 Space; capture 5-decode
tmux send-keys -t "$session" Enter; sleep 3; tmux send-keys -t "$session" Enter; capture 5-decode-played
tmux send-keys -t "$session" 6 T T; capture 6-sampling
tmux send-keys -t "$session" 7; capture 7-costs
tmux send-keys -t "$session" 8; capture 8-summary
tmux send-keys -t "$session" g; capture glossary
tmux send-keys -t "$session" Escape; sleep 0.5  # let the terminal's escape timeout pass
tmux send-keys -t "$session" '?'; capture help
tmux send-keys -t "$session" Escape; sleep 0.5
tmux send-keys -t "$session" q
sleep 1
echo "captures in $out"
