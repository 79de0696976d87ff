#!/usr/bin/env bash
# The Python module against what a PyTorch user has, in one sitting, on the
# bench-ssd shape (8 tables x 4,000,000 rows x D=64, 7.63 GiB; batch 2048):
#
#   1. the tables' step alone (forward, backward, SGD), all in DRAM:
#      cemb.torch.EmbeddingBagCollection against nn.EmbeddingBag(sparse=True)
#      with torch.optim.SGD (bench/python_tables_bench.py), on the bench-ssd
#      data (one value per bag, Zipf 1.05) and on the same tables with 20
#      values per bag; ROUNDS rounds of A B, each line its own median;
#   2. a whole DLRM in PyTorch (examples/python/train_dlrm.py: torch MLPs and
#      interaction, bench-ssd's widths) with its tables
#      a. in cemb, dram, no cap;
#      b. in cemb, ssd in SSD_DIR, under ../shared/tools/memlimit CAP (page
#         cache included; 1950M: the tables are 4x the cap), once with
#         BUDGET_FIT (the hot rows fit) and once with BUDGET_SMALL (they do not);
#      c. as nn.EmbeddingBag weights in files mapped with
#         torch.from_file(shared=True) under the same cap (the page cache as
#         the cache; bench/reference/torch_mmap_dlrm.py), PEER_STEPS steps;
#      d. as nn.EmbeddingBag weights in DRAM (the same script, --in_memory).
#
#   sudo bash bench/run_python.sh          # as root (memlimit needs it)
#
# Environment: BUILD_DIR (build), SSD_DIR (/work/tmp/pyssd: on the drive under
# test), CAP (1950M), BUDGET_FIT (1GiB), BUDGET_SMALL (256MiB), STEPS (200),
# PEER_STEPS (40), ROUNDS (2), OUT (a new temporary directory: logs and data).
# torch's matmuls need OpenBLAS, for this benchmark only (not in
# scripts/setup.sh): apt-get install python3-torch libopenblas0 (Debian's
# netlib BLAS alone is ~10x slower, and the script refuses it).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
BUILD_DIR=${BUILD_DIR:-build}
SSD_DIR=${SSD_DIR:-/work/tmp/pyssd}
CAP=${CAP:-1950M}
BUDGET_FIT=${BUDGET_FIT:-1GiB}
BUDGET_SMALL=${BUDGET_SMALL:-256MiB}
STEPS=${STEPS:-200}
PEER_STEPS=${PEER_STEPS:-40}
ROUNDS=${ROUNDS:-2}
OUT=${OUT:-$(mktemp -d)}
MEMLIMIT=${MEMLIMIT:-../shared/tools/memlimit}
PYTHON=/usr/bin/python3
export PYTHONPATH="$PWD/$BUILD_DIR/python"

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target dlrm-train dlrm-data cemb_python >/dev/null
mkdir -p "$OUT" "$SSD_DIR"
# torch's MLPs (the DLRM of part 2) on OpenBLAS at this CPU's best core, not
# the generic fallback 0.3.21 picks on newer Xeons (~4x slower sgemm): it
# exports OPENBLAS_CORETYPE for every run below, cemb's and the peers'.
source bench/torch_blas.sh
torch_blas "$PYTHON" || { echo "run_python.sh: $blas" >&2; exit 1; }
echo "== $(machine_line), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== torch: $blas"
echo "== CAP $CAP, BUDGET_FIT $BUDGET_FIT, BUDGET_SMALL $BUDGET_SMALL, STEPS $STEPS, logs in $OUT"

# The bench-ssd data as dlrm-train prepares it (STEPS + 10 batches), and
# the same tables with 20 values per bag.
samples=$(( (STEPS + 10) * 2048 ))
"$BUILD_DIR/apps/dlrm-train" --config configs/bench-ssd.yaml --set "data.samples=$samples" \
  --set "data.work_dir=$OUT/data" --set train.steps=1 --set train.eval_every=0 >"$OUT/prepare.txt" 2>&1 ||
  { tail -20 "$OUT/prepare.txt"; exit 1; }
data=$(ls "$OUT"/data/*/train.bin | head -1)
"$BUILD_DIR/apps/dlrm-data" generate --output "$OUT/hot20.bin" --samples $(( STEPS * 2048 )) \
  --table-sizes 4000000,4000000,4000000,4000000,4000000,4000000,4000000,4000000 --hotness 20 \
  --distribution zipf --alpha 1.05 >/dev/null

echo "== 1. the tables' step (forward, backward, SGD), all in DRAM"
for round in $(seq "$ROUNDS"); do
  for d in "$data" "$OUT/hot20.bin"; do
    for impl in cemb torch; do
      "$PYTHON" bench/python_tables_bench.py --data "$d" --impl "$impl" --steps "$STEPS" | tail -1
    done
  done
done

echo "== 2. a DLRM in PyTorch"
example=("$PYTHON" examples/python/train_dlrm.py --data "$data" --steps "$STEPS" --progress 0)
echo "-- a. tables in cemb, dram, no cap"
"${example[@]}" --storage dram | tail -1
for budget in "$BUDGET_FIT" "$BUDGET_SMALL"; do
  echo "-- b. tables in cemb, ssd, memlimit $CAP, dram_budget $budget"
  rm -rf "$SSD_DIR/cemb"
  "$MEMLIMIT" "$CAP" "${example[@]}" --storage ssd --directory "$SSD_DIR/cemb" --dram-budget "$budget" |
    grep -E '^(ssd tables|train_dlrm: steps|memlimit)'
done
rm -rf "$SSD_DIR/cemb"
peer=("$PYTHON" bench/reference/torch_mmap_dlrm.py --data "$data" --dir "$SSD_DIR/torch" --threads "$(nproc)")
echo "-- c. tables as nn.EmbeddingBag weights mapped with torch.from_file, memlimit $CAP, $PEER_STEPS steps"
"$MEMLIMIT" "$CAP" "${peer[@]}" --steps "$PEER_STEPS" | grep -E '^(torch_mmap|memlimit)'
echo "-- d. tables as nn.EmbeddingBag weights in DRAM, no cap"
"${peer[@]}" --steps "$STEPS" --in_memory | grep -E '^torch_mmap'
rm -rf "$SSD_DIR/torch"
