#!/usr/bin/env bash
# Times dlrm-train's training step against the PyTorch reference step in the
# same sitting (issue 5, item 10): the Kaggle model and the dlrm_s_benchmark.sh
# model at batch 2048 on random data, fp32 and bf16 MLPs, ROUNDS interleaved
# rounds, and prints one table of medians. The guest's speed drifts by up to 2x
# over minutes, so a ratio is only meaningful between runs of one sitting.
#
#   bench/run_dlrm.sh                 both models, 3 rounds (~5 minutes)
#   bench/run_dlrm.sh --kaggle        the Kaggle model only
#   bench/run_dlrm.sh --no-pytorch    dlrm-train only (no python3-torch needed)
#
# Environment: BUILD_DIR (default build), ROUNDS (default 3), THREADS (default 2),
# PYTHON (default /usr/bin/python3: Debian's python3-torch, which dlrm-train
# itself never needs; with libopenblas0 installed, as with the netlib BLAS
# that python3-torch pulls in alone its step is ~10x slower).
set -euo pipefail

cd "$(dirname "$0")/.."
models=(kaggle dlrm-s)
pytorch=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kaggle) models=(kaggle); shift ;;
    --no-pytorch) pytorch=0; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "run_dlrm.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
build=${BUILD_DIR:-build}
rounds=${ROUNDS:-3}
threads=${THREADS:-2}
python=${PYTHON:-/usr/bin/python3}
train=$build/apps/dlrm-train
[[ -x $train ]] || { echo "run_dlrm.sh: $train not built (cmake --build $build --target dlrm-train)" >&2; exit 1; }
if ((pytorch)) && ! "$python" -c 'import torch' 2>/dev/null; then
  echo "run_dlrm.sh: $python has no torch (apt-get install python3-torch libopenblas0), or pass --no-pytorch" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ms/step of one dlrm-train run: the summary record's phase seconds over its steps.
cemb_ms() {  # model precision
  local log=$work/$1-$2.jsonl
  "$train" --config "configs/bench-$1.yaml" --set model.mlp_precision="$2" --set train.threads="$threads" \
    --set train.log_jsonl="$log" > /dev/null
  "$python" - "$log" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]
print(f"{1e3 * sum(s['phases'].values()) / (s['steps'] - s.get('first_step', 0)):.1f}")
PY
}

torch_ms() {  # model
  local steps=30
  [[ $1 == kaggle ]] || steps=8
  "$python" bench/reference/dlrm_reference.py --model "$1" --threads "$threads" --steps $steps --warmup 2 |
    sed -n 's/.*: \([0-9.]*\) ms\/step.*/\1/p'
}

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "$(date -u '+%F %H:%M') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $rounds rounds, $threads threads"
declare -A runs
for ((r = 1; r <= rounds; ++r)); do
  for m in "${models[@]}"; do
    for p in fp32 bf16; do runs[$m-$p]+=" $(cemb_ms "$m" "$p")"; done
    ((pytorch)) && runs[$m-torch]+=" $(torch_ms "$m")"
  done
  echo "round $r: $(for k in $(printf "%s\n" "${!runs[@]}" | sort); do printf '%s=%s ' "$k" "${runs[$k]##* }"; done)"
done

printf '\n%-8s %12s %12s %14s %12s %12s\n' model "torch ms" "fp32 ms" "fp32 speed-up" "bf16 ms" "bf16 speed-up"
for m in "${models[@]}"; do
  f=$(median <<< "${runs[$m-fp32]}") b=$(median <<< "${runs[$m-bf16]}") t=-
  ((pytorch)) && t=$(median <<< "${runs[$m-torch]}")
  if ((pytorch)); then
    printf '%-8s %12s %12s %13.2fx %12s %11.2fx\n' "$m" "$t" "$f" "$(bc -l <<< "$t/$f")" "$b" "$(bc -l <<< "$t/$b")"
  else
    printf '%-8s %12s %12s %14s %12s %12s\n' "$m" - "$f" - "$b" -
  fi
done
