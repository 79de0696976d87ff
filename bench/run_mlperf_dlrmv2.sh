#!/usr/bin/env bash
# configs/mlperf-dlrmv2.yaml as shipped: MLPerf Training's DLRM-DCNv2 in its
# reference shape (26 tables, 204 M rows of dim 128 in bf16 = 52 GB, each row
# with its 128 fp32 Adagrad accumulators: 157 GB on the ssd tier, multi-hot up
# to 100, 3 low-rank cross layers, element-wise Adagrad, batch 16384),
# on synthetic Zipf multi-hot data, under a memory cap well below the tables.
# Prints the machine, dlrm-train's own report (model and dram_budget lines,
# samples/s, the phase breakdown, each table's ssd traffic), the cap's peak
# memory, the wall time (start-up = wall - training - evaluation) and the disk
# the run took (the rows file is reserved at start).
#
#   sudo bash bench/run_mlperf_dlrmv2.sh
#   STEPS=50 CAP=12G SSD_DIR=/nvme sudo -E bash bench/run_mlperf_dlrmv2.sh
#
# Environment: BUILD_DIR (build), SSD_DIR ($TMPDIR or /tmp: needs about 173 GB
# free, `ssd_file_space: 1.1`; where it has less, cap the tables in EXTRA, e.g.
# --set data.max_ind_range=12000000: 54 GB), STEPS (200), CAP (16G: ../shared/tools/memlimit;
# empty = none), OUT (a new temporary directory: the data, 3.9 GB, and the log),
# EXTRA (more dlrm-train arguments, e.g. the config's scale-down:
# EXTRA='--set data.max_ind_range=2000 --set data.samples=8192 --set train.batch_size=512').
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
BUILD_DIR=${BUILD_DIR:-build}
SSD_DIR=${SSD_DIR:-${TMPDIR:-/tmp}}
STEPS=${STEPS:-200}
CAP=${CAP-16G}
OUT=${OUT:-$(mktemp -d)}
read -r -a extra <<< "${EXTRA:-}"

mkdir -p "$SSD_DIR" "$OUT"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target dlrm-train >/dev/null

echo "== $(machine_line), $(free -g | awk '/^Mem:/ {print $2}') GiB, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== SSD_DIR $SSD_DIR ($(df -h --output=avail "$SSD_DIR" | tail -1 | tr -d ' ') free), STEPS $STEPS, CAP ${CAP:-none}," \
     "log in $OUT"

run=("$BUILD_DIR/apps/dlrm-train" --config configs/mlperf-dlrmv2.yaml
     --set "model.storage.slow_tier=$SSD_DIR" --set "train.steps=$STEPS" --set train.progress=false
     --set "train.log_jsonl=$OUT/run.jsonl" --set train.log_every=10 --set "data.work_dir=$OUT/data" "${extra[@]}")
if [ -n "$CAP" ]; then run=(../shared/tools/memlimit "$CAP" "${run[@]}"); fi
# The most disk the run holds: sampled every 10 s while it runs.
used() { df -B1 --output=used "$SSD_DIR" | tail -1; }
before=$(used)
( peak=$before; while sleep 10; do u=$(used); [ "$u" -gt "$peak" ] && peak=$u; echo "$peak" > "$OUT/disk_peak"; done ) &
sampler=$!
start=$(date +%s.%N)
"${run[@]}" 2>&1 | tee "$OUT/run.txt"
wall=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
kill "$sampler"
echo "== wall ${wall} s; disk held at most $(( ($(cat "$OUT/disk_peak" 2>/dev/null || echo "$before") - before) / 1000000 )) MB" \
     "above the $(( before / 1000000000 )) GB used before (the data's 3.9 GB included)"
