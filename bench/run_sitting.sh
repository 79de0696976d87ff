#!/usr/bin/env bash
# The README's "Where it stands" in one sitting on one machine: every bullet's
# figures measured back to back by the scripts that measure them, so that
# their ratios can be read side by side. About 100 minutes on a 2-core VM;
# the machine should do nothing else meanwhile.
#
#   sudo bash bench/run_sitting.sh OUT               # every part (as root: memlimit needs it)
#   sudo bash bench/run_sitting.sh OUT ssd serve     # some parts
#
# OUT must be on the drive under test (not tmpfs). Parts, in order:
#   dlrm    a training step against PyTorch's DLRM, fp32 and bf16, Kaggle and
#           dlrm_s (ROUNDS=3 bench/run_dlrm.sh): the step and bf16 bullets.
#   cache   a cache hit: a fully cached table (kClock) against the same table
#           in DRAM and against a plain pointer array (bench/serve_bench, the
#           two shapes of bench/RESULTS.md's cache rows).
#   python  the tables' step from PyTorch against nn.EmbeddingBag, a PyTorch
#           DLRM with its tables on ssd under a cap, torch.from_file
#           (bench/run_python.sh, PY_STEPS steps, PY_PEER_STEPS for the maps).
#   serve   the predictor against PyTorch eager in DRAM, the tables served in
#           place under a 3 GiB cap, dlrm-serve against the in-process rate,
#           int8 rows against fp32 (bench/run_serve.sh OUT/serve with
#           SERVE_PHASES; prepare makes its checkpoints only where OUT/serve has
#           none: SERVE_OUT names another directory that holds them, and the
#           logs of an earlier sitting there are moved to logs-<time> first,
#           since its summary reads every log in SERVE_OUT/logs).
#   ssd     dlrm-train with bench-ssd's 7.6 GiB of tables under a 3 GiB cap
#           against all in DRAM (bench/run_ssd_dlrm.sh): the warm-up (Zipf,
#           512 MiB, SSD_STEPS steps from rows computed on first use), then
#           the steady state's reads (uniform, 512 MiB, WRITTEN=1: every row
#           written before the first step, so every miss is a read, and
#           SSD_WRITTEN_STEPS steps, enough for the log's collector to run),
#           with PyTorch on torch.from_file maps under the same cap.
#           The WRITTEN run's parameters are the serving sitting's bench-ssd
#           weights (SERVE_OUT/ssd/npy) when they are there, else exported.
# Each part's output is kept in OUT/logs/<part>.txt; OUT/summary.txt gathers
# the tables each script ends with. Disk: run_serve.sh's (about 35 GB while
# its checkpoints are made, 20 GB after), and for the ssd part an 11.7 GiB
# log file at a time plus, without the serving weights, 7.6 GiB of exported
# parameters (OUT/ssd-uniform/init).
#
# Environment: BUILD_DIR (build), SERVE_OUT (OUT/serve), SERVE_PHASES ("prepare
# drive dram http-dram http-ssd formats formats-auc"), SSD_STEPS (1000),
# SSD_WRITTEN_STEPS (2000), PY_STEPS (100), PY_PEER_STEPS (20), and each
# script's own variables (bench/run_*.sh --help or their headers).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
[[ $# -ge 1 ]] || { sed -n '2,44p' "$0"; exit 2; }
OUT=$(realpath -m "$1")
shift
parts=("$@")
((${#parts[@]})) || parts=(dlrm cache python serve ssd)
export BUILD_DIR=${BUILD_DIR:-build}
SERVE_OUT=$(realpath -m "${SERVE_OUT:-$OUT/serve}")
SSD_STEPS=${SSD_STEPS:-1000}
SSD_WRITTEN_STEPS=${SSD_WRITTEN_STEPS:-2000}
PY_STEPS=${PY_STEPS:-100}
PY_PEER_STEPS=${PY_PEER_STEPS:-20}
read -r -a serve_phases <<< "${SERVE_PHASES:-prepare drive dram http-dram http-ssd formats formats-auc}"
for part in "${parts[@]}"; do
  case $part in dlrm | cache | python | serve | ssd) ;; *) echo "run_sitting.sh: unknown part '$part'" >&2; exit 2 ;; esac
done
logs=$OUT/logs
mkdir -p "$logs"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" >/dev/null

# part NAME COMMAND...: runs COMMAND with its output in logs/NAME.txt (and on
# the terminal), between two lines with the time and the load.
part() {
  local name=$1
  shift
  { echo "== $name: $(machine_line), load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$@"
    echo "== $name done $(date -u '+%H:%M') UTC"; } 2>&1 | tee "$logs/$name.txt"
}

for p in "${parts[@]}"; do
  case $p in
  dlrm) part dlrm env ROUNDS=3 bash bench/run_dlrm.sh ;;
  cache)
    part cache bash -c "'$BUILD_DIR/bench/serve_bench' --pairs 20 --seconds 0.3 --threads 1,2 --rows 1000000 --dim 128 \
      --alpha 0 && '$BUILD_DIR/bench/serve_bench' --pairs 20 --seconds 0.3 --threads 1,2" ;;
  python)
    part python env OUT="$OUT/python" STEPS="$PY_STEPS" PEER_STEPS="$PY_PEER_STEPS" bash bench/run_python.sh ;;
  serve)
    [[ -d $SERVE_OUT/logs ]] && mv "$SERVE_OUT/logs" "$SERVE_OUT/logs-$(date -u -r "$SERVE_OUT/logs" '+%Y%m%d-%H%M')"
    part serve bash bench/run_serve.sh "$SERVE_OUT" "${serve_phases[@]}" ;;
  ssd)
    part ssd-warmup env SSD_DIR="$OUT/ssd-tier" OUT="$OUT/ssd-zipf" DISTS=zipf BUDGET=512MiB STEPS="$SSD_STEPS" \
      bash bench/run_ssd_dlrm.sh
    rm -rf "$OUT/ssd-tier" "$OUT/ssd-zipf/data"
    mkdir -p "$OUT/ssd-uniform"
    [[ -f $SERVE_OUT/ssd/npy/top_l.0.weight.npy && ! -e $OUT/ssd-uniform/init ]] &&
      ln -s "$SERVE_OUT/ssd/npy" "$OUT/ssd-uniform/init"
    part ssd-steady env SSD_DIR="$OUT/ssd-tier" OUT="$OUT/ssd-uniform" DISTS=uniform BUDGET=512MiB \
      STEPS="$SSD_WRITTEN_STEPS" WRITTEN=1 PEER=1 PEER_STEPS=20 PEER_ARGS="--madvise random" bash bench/run_ssd_dlrm.sh
    rm -rf "$OUT/ssd-tier" ;;
  esac
done

# Each script ends with its summary: the lines from its last table's header on.
{ echo "== $(machine_line): the sitting's summaries (logs in $logs)"
  for f in "$logs"/*.txt; do
    echo
    echo "-- $(basename "$f" .txt)"
    case $(basename "$f") in
    dlrm.txt) sed -n '/^model /,$p' "$f" ;;
    cache.txt) cat "$f" ;;
    python.txt) sed -n '/^== 1\./,$p' "$f" ;;
    serve.txt) sed -n '/summary (from/,$p' "$f" ;;
    ssd-*.txt) sed -n '/indices: all in DRAM/,$p' "$f" ;;
    esac
  done; } | tee "$OUT/summary.txt"
