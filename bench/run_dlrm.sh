#!/usr/bin/env bash
# Times dlrm-train's training step against the PyTorch reference step in the
# same sitting: the Kaggle model and the dlrm_s_benchmark.sh
# model at batch 2048 on random data, fp32 and bf16 MLPs, ROUNDS interleaved
# rounds, and prints one table of medians. The guest's speed drifts by up to 2x
# over minutes, so a ratio is only meaningful between runs of one sitting.
#
#   bench/run_dlrm.sh                 both models, 3 rounds (~5 minutes)
#   bench/run_dlrm.sh --kaggle        the Kaggle model only
#   bench/run_dlrm.sh --no-pytorch    dlrm-train only (no python3-torch needed)
#
# Environment: BUILD_DIR (default build), ROUNDS (default 3), THREADS (default 2,
# for both dlrm-train and torch), PYTHON (default /usr/bin/python3).
# The peer needs, for this benchmark only (not in scripts/setup.sh):
#   apt-get install python3-torch libopenblas0
# Debian's torch does its matmuls in whatever libblas.so.3 is installed: the
# netlib reference BLAS that python3-torch pulls in alone is ~10x slower, so the
# script refuses it. OpenBLAS 0.3.21 falls back to generic kernels on CPUs it
# does not know (newer Xeons: "Core: Prescott", sgemm ~4x slower); the script
# probes the core OpenBLAS picked and, on such a fallback, sets
# OPENBLAS_CORETYPE to the best core this CPU's flags allow, and says which.
set -euo pipefail

cd "$(dirname "$0")/.."
models=(kaggle dlrm-s)
pytorch=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kaggle) models=(kaggle); shift ;;
    --no-pytorch) pytorch=0; shift ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
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

# The peer runs on as many threads as dlrm-train: torch's own (set by the
# reference) and OpenBLAS's pthread pool, which torch.set_num_threads leaves at
# all cores.
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads

source bench/torch_blas.sh
blas="-"
if ((pytorch)) && ! torch_blas "$python"; then
  echo "run_dlrm.sh: $blas, or pass --no-pytorch" >&2
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
  local steps=30 out
  [[ $1 == kaggle ]] || steps=8
  out=$("$python" bench/reference/dlrm_reference.py --model "$1" --threads "$threads" --steps $steps --warmup 2)
  # The reference reports the threads torch and OpenBLAS actually use.
  if ! grep -q "threads $threads (blas $threads)" <<< "$out"; then
    echo "run_dlrm.sh: the reference did not run on $threads threads: $out" >&2
    return 1
  fi
  sed -n 's/.*: \([0-9.]*\) ms\/step.*/\1/p' <<< "$out"
}

# bf16 MLPs only where dlrm-train runs them: below AVX-512 oneDNN has no bf16
# matmul and dlrm-train refuses model.mlp_precision=bf16 (the header says so).
precisions=(fp32 bf16)
if ! refusal=$("$train" --config configs/bench-kaggle.yaml --set model.mlp_precision=bf16 --set train.steps=1 \
  --set data.samples=8192 --set data.validation_fraction=0.1 2>&1 > /dev/null); then
  precisions=(fp32)
fi

median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "$(date -u '+%F %H:%M') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $rounds rounds, $threads threads"
echo "cpu: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); peer: $blas"
((${#precisions[@]} > 1)) || echo "bf16 MLPs not timed: ${refusal#dlrm-train: }"
declare -A runs
for ((r = 1; r <= rounds; ++r)); do
  for m in "${models[@]}"; do
    for p in "${precisions[@]}"; do runs[$m-$p]+=" $(cemb_ms "$m" "$p")"; done
    ((pytorch)) && runs[$m-torch]+=" $(torch_ms "$m")"
  done
  echo "round $r: $(for k in $(printf "%s\n" "${!runs[@]}" | sort); do printf '%s=%s ' "$k" "${runs[$k]##* }"; done)"
done

printf '\n%-8s %12s %12s %14s %12s %12s\n' model "torch ms" "fp32 ms" "fp32 speed-up" "bf16 ms" "bf16 speed-up"
for m in "${models[@]}"; do
  f=$(median <<< "${runs[$m-fp32]}") b=- t=- fs=- bs=-
  ((${#precisions[@]} > 1)) && b=$(median <<< "${runs[$m-bf16]}")
  ((pytorch)) && t=$(median <<< "${runs[$m-torch]}") && fs=$(printf '%.2fx' "$(bc -l <<< "$t/$f")")
  ((pytorch)) && [[ $b != - ]] && bs=$(printf '%.2fx' "$(bc -l <<< "$t/$b")")
  printf '%-8s %12s %12s %14s %12s %12s\n' "$m" "$t" "$f" "$fs" "$b" "$bs"
done
