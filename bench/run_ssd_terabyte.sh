#!/usr/bin/env bash
# the MLPerf DLRM shape of configs/terabyte.yaml at
# D=64 (26 tables, 204 M rows, 52 GB of fp32 rows; bottom 13-512-256-64, top
# 1024-1024-512-256-1, batch 32768) with every table on ssd, trained on
# synthetic Zipf(1.05) data on a machine with less memory than the tables.
# Prints dlrm-train's own report: the model and dram_budget lines, samples/s,
# the phase breakdown (where the time goes) and each table's ssd traffic.
#
#   bash bench/run_ssd_terabyte.sh
#   SSD_DIR=/nvme BUDGET=8GiB STEPS=40 bash bench/run_ssd_terabyte.sh
#
# Environment: BUILD_DIR (build), SSD_DIR (/work/tmp: needs 52 GB free on the
# drive under test), BUDGET (8GiB), STEPS (30), BATCH (32768), THREADS (0 =
# all cores), CAP (empty: no memory cap; e.g. 16G to run under
# ../shared/tools/memlimit), OUT (a new temporary directory for the log).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
BUILD_DIR=${BUILD_DIR:-build}
SSD_DIR=${SSD_DIR:-/work/tmp}
BUDGET=${BUDGET:-8GiB}
STEPS=${STEPS:-30}
BATCH=${BATCH:-32768}
THREADS=${THREADS:-0}
CAP=${CAP:-}
OUT=${OUT:-$(mktemp -d)}

mkdir -p "$SSD_DIR" "$OUT"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target dlrm-train >/dev/null

echo "== $(machine_line), $(free -g | awk '/^Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== SSD_DIR $SSD_DIR ($(df -h --output=avail "$SSD_DIR" | tail -1 | tr -d ' ') free), BUDGET $BUDGET," \
     "STEPS $STEPS x $BATCH, CAP ${CAP:-none}, log in $OUT"

run=("$BUILD_DIR/apps/dlrm-train" --config configs/terabyte.yaml
     --set data.source=synthetic --set 'data.paths=[]' --set data.distribution=zipf --set data.alpha=1.05
     --set "data.samples=$(( (STEPS + 2) * BATCH ))" --set "data.validation_fraction=$(python3 -c "print(2 / ($STEPS + 2))")"
     --set model.embedding_dim=64 --set 'model.bottom_mlp=[512,256,64]'
     --set model.storage.kind=ssd --set "model.storage.slow_tier=$SSD_DIR" --set 'model.table_storage={}'
     --set "model.dram_budget=$BUDGET" --set "train.batch_size=$BATCH" --set "train.steps=$STEPS"
     --set train.eval_every=0 --set train.eval_batches=1 --set train.checkpoint_dir= --set train.checkpoint_every=0 --set train.log_jsonl= --set train.progress=false
     --set "train.threads=$THREADS" --set "train.log_jsonl=$OUT/terabyte.jsonl" --set "data.work_dir=$OUT/data")
if [ -n "$CAP" ]; then run=(../shared/tools/memlimit "$CAP" "${run[@]}"); fi
/usr/bin/time -v "${run[@]}" 2>&1 | tee "$OUT/terabyte.txt" | grep -v '^\s*\(Average\|Exit\|Socket\|Signals\|Swaps\|File system\|Page size\|Voluntary\|Involuntary\|Minor\|Percent\|Command\)'
