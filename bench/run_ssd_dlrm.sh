#!/usr/bin/env bash
# dlrm-train with tables larger than memory on the ssd
# tier against the same model all in DRAM, in one sitting, with the disk's
# own limit measured in the same run.
#
#   1. the disk: sequential 1 MiB O_DIRECT writes of a 4 GiB file in
#      SSD_DIR, then random 4 KiB reads of it at queue depth 64
#      (bench/ssd_bench --limit_only 1);
#   2. for each index distribution (DISTS, default "zipf uniform"):
#      a. configs/bench-ssd.yaml with every table in DRAM, no memory cap;
#      b. the same with every table on ssd in SSD_DIR, model.dram_budget =
#         BUDGET, under ../shared/tools/memlimit CAP (page cache included);
#      and prints samples/s of both and their ratio, whether the two runs'
#      step losses are bit-identical (the summary's losses_digest), the ssd
#      run's requests per step and its I/O floor: its block reads of missed
#      rows at the disk's measured random-read rate plus its bytes written
#      at the measured sequential-write rate, the least a step can take when
#      it is I/O bound (the log's writes are sequential), its write
#      amplification and what the collector moved;
#      c. with PEER=1, the comparison a PyTorch user would make: the same
#         model on the same prepared samples in PyTorch, each table an
#         nn.EmbeddingBag whose weight is a file in SSD_DIR mapped with
#         torch.from_file(shared=True) (the page cache as the cache), under
#         the same memlimit CAP (bench/reference/torch_mmap_dlrm.py), and
#         prints its samples/s against DRAM's and ours. The peer takes the
#         tables' count and sizes from the data (EXTRA may change them); the
#         rest of its model is bench-ssd.yaml's, whatever EXTRA says.
#
#   A row never written is computed from its seed when first missed, not
#   read: until most rows have been written (thousands of steps with uniform
#   indices), a run measures a warm-up. WRITTEN=1 starts both runs from the
#   same exported parameters (model.init_from), which writes every row of
#   the ssd tables before the first step, so that every miss is a read; the
#   summary prints the rows computed either way.
#
#   sudo bash bench/run_ssd_dlrm.sh                    # as root (memlimit needs it)
#   SSD_DIR=/nvme STEPS=200 DISTS=zipf bash bench/run_ssd_dlrm.sh
#   PEER=1 bash bench/run_ssd_dlrm.sh                  # also the torch mmap peer
#   WRITTEN=1 DISTS=uniform bash bench/run_ssd_dlrm.sh # every row written first: the steady state's reads
#
# Environment: BUILD_DIR (build), SSD_DIR (/work/tmp: must be on the drive
# under test, not tmpfs), CAP (3G), BUDGET (2GiB), STEPS (300), THREADS (0 =
# all cores), OUT (a new temporary directory for the logs and the prepared
# data, $OUT/data), EXTRA (more --set arguments for both runs), PEER (1: also
# the torch mmap peer), PYTHON (/usr/bin/python3, the peer's), PEER_ARGS (more
# arguments for the peer, e.g. "--madvise random" or "--init zeros": see
# bench/reference/torch_mmap_dlrm.py --help), PEER_STEPS (STEPS: the peer's
# steps, fewer where it is much slower), WRITTEN (1: every row written
# before the first step; the parameters, exported once, are kept in
# $OUT/init: 7.6 GiB of .npy for bench-ssd).
# The peer needs, for this benchmark only (not in scripts/setup.sh):
#   apt-get install python3-torch libopenblas0
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
BUILD_DIR=${BUILD_DIR:-build}
SSD_DIR=${SSD_DIR:-/work/tmp}
CAP=${CAP:-3G}
BUDGET=${BUDGET:-2GiB}
STEPS=${STEPS:-300}
THREADS=${THREADS:-0}
DISTS=${DISTS:-zipf uniform}
OUT=${OUT:-$(mktemp -d)}
EXTRA=${EXTRA:-}
MEMLIMIT=${MEMLIMIT:-../shared/tools/memlimit}
PEER=${PEER:-0}
PEER_STEPS=${PEER_STEPS:-$STEPS}
PYTHON=${PYTHON:-/usr/bin/python3}
PEER_ARGS=${PEER_ARGS:-}
WRITTEN=${WRITTEN:-0}

mkdir -p "$SSD_DIR" "$OUT"
if [[ $PEER == 1 ]] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "run_ssd_dlrm.sh: PEER=1 needs torch in $PYTHON (apt-get install python3-torch libopenblas0)" >&2
  exit 1
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target dlrm-train ssd_bench >/dev/null
train=$BUILD_DIR/apps/dlrm-train

echo "== $(machine_line), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== SSD_DIR $SSD_DIR ($(stat -f -c %T "$SSD_DIR")), CAP $CAP, BUDGET $BUDGET, STEPS $STEPS, logs in $OUT"

"$BUILD_DIR/bench/ssd_bench" --limit_only 1 --dir "$SSD_DIR" --rows 16777216 | tee "$OUT/limit.txt"
limit=$(sed -n 's/^limit: \([0-9]*\) random.*/\1/p' "$OUT/limit.txt")
seqwrite=$(sed -n 's/^seqwrite: \([0-9]*\) MiB.*/\1/p' "$OUT/limit.txt")

# One epoch of STEPS batches (no row of the data repeats) plus 10 validation
# batches; the generated dataset is shared by the runs (and the peer), kept
# in $OUT/data.
samples=$(( (STEPS + 10) * 2048 ))
common=(--config configs/bench-ssd.yaml --set "data.samples=$samples" --set "data.work_dir=$OUT/data"
        --set "data.validation_fraction=$(python3 -c "print(10 / ($STEPS + 10))")"
        --set "train.steps=$STEPS" --set "train.threads=$THREADS"
        --set "train.eval_every=$(( STEPS / 2 ))" --set train.eval_batches=1)
for e in $EXTRA; do common+=(--set "$e"); done
if [[ $WRITTEN == 1 ]]; then
  # The parameters after one step, all in DRAM (no cap), exported once; both
  # runs start from them, so their losses stay comparable bit for bit.
  if [[ ! -f $OUT/init/top_l.0.weight.npy ]]; then
    echo "== WRITTEN=1: exporting the model's parameters to $OUT/init"
    "$train" "${common[@]}" --set train.steps=1 --set train.eval_every=0 --export "$OUT/init" >"$OUT/init.txt" 2>&1 ||
      { tail -20 "$OUT/init.txt"; exit 1; }
  fi
  common+=(--set "model.init_from=$OUT/init")
fi

for dist in $DISTS; do
  echo "== $dist indices: all in DRAM, no cap"
  "$train" "${common[@]}" --set "data.distribution=$dist" --set "train.log_jsonl=$OUT/dram-$dist.jsonl" \
    >"$OUT/dram-$dist.txt" 2>&1 || { tail -20 "$OUT/dram-$dist.txt"; exit 1; }
  echo "== $dist indices: every table on ssd, memlimit $CAP, dram_budget $BUDGET"
  "$MEMLIMIT" "$CAP" "$train" "${common[@]}" --set "data.distribution=$dist" \
    --set model.storage.kind=ssd --set "model.storage.slow_tier=$SSD_DIR" --set "model.dram_budget=$BUDGET" \
    --set "train.log_jsonl=$OUT/ssd-$dist.jsonl" >"$OUT/ssd-$dist.txt" 2>&1 || { tail -20 "$OUT/ssd-$dist.txt"; exit 1; }
  grep -h '^memlimit:\|^model\|dram_budget' "$OUT/ssd-$dist.txt" | head -3 || true
  peer=""
  if [[ $PEER == 1 ]]; then
    # The train.bin the two runs trained on: the prepared directory whose RECIPE has this distribution.
    data=$(grep -l "^setting distribution=$dist\$" "$OUT"/data/*/RECIPE | head -1)
    data=${data%/RECIPE}/train.bin
    echo "== $dist indices: torch mmap peer, every table a torch.from_file in $SSD_DIR/torch-mmap, memlimit $CAP"
    peer_threads=$THREADS; ((peer_threads > 0)) || peer_threads=$(nproc)
    PYTHONPATH="$BUILD_DIR/python" OMP_NUM_THREADS=$peer_threads OPENBLAS_NUM_THREADS=$peer_threads \
      "$MEMLIMIT" "$CAP" "$PYTHON" bench/reference/torch_mmap_dlrm.py --data "$data" --dir "$SSD_DIR/torch-mmap" \
      --steps "$PEER_STEPS" --threads "$peer_threads" $PEER_ARGS >"$OUT/torch-$dist.txt" 2>&1 ||
      { tail -20 "$OUT/torch-$dist.txt"; exit 1; }
    rm -rf "$SSD_DIR/torch-mmap"
    grep -h '^memlimit:' "$OUT/torch-$dist.txt" || true
    peer=$(grep '^torch_mmap:' "$OUT/torch-$dist.txt")
    echo "  peer: ${peer#*; }"
  fi
  python3 - "$OUT/dram-$dist.jsonl" "$OUT/ssd-$dist.jsonl" "$limit" "$peer" "$seqwrite" "$WRITTEN" <<'EOF'
import json, re, sys
def summary(path):
    return [json.loads(l) for l in open(path) if '"summary"' in l][-1]
dram, ssd, limit = summary(sys.argv[1]), summary(sys.argv[2]), float(sys.argv[3])
seqwrite = float(sys.argv[5]) * (1 << 20)  # bytes/s
steps = ssd["steps"]
tables = [t["ssd"] for t in ssd["tables"] if "ssd" in t]
total = lambda key: sum(t[key] for t in tables)
fetch_reads, written = total("fetch_reads"), total("bytes_written")
requests = total("reads") + total("writes")
asked = sum(t["ssd"]["rows_asked"] for t in ssd["tables"] if "ssd" in t)
hits = sum(t["ssd"]["hit_rate"] * t["ssd"]["rows_asked"] for t in ssd["tables"] if "ssd" in t)
step_ms = lambda s: 1e3 * s["train_seconds"] / s["steps"]
def second_half(path):
    # samples/s over the second half of the run (the evaluation records at
    # STEPS/2 and STEPS carry the cumulative samples/s of the training steps)
    e = [json.loads(l) for l in open(path) if '"eval"' in l]
    (s1, r1), (s2, r2) = (e[0]["samples"], e[0]["samples_per_s"]), (e[-1]["samples"], e[-1]["samples_per_s"])
    return (s2 - s1) / (s2 / r2 - s1 / r1)
# The floor: a missed row's block at the random-read rate, the log's bytes
# at the sequential-write rate (the collector's reads are counted as writes'
# companions: they are as large and as sequential).
gc_read = total("collector_bytes_read")
floor_ms = 1e3 * (fetch_reads / limit + (written + gc_read) / seqwrite) / steps
print(f"  DRAM {dram['samples_per_s']:9.0f} samples/s ({step_ms(dram):6.1f} ms/step)")
print(f"  ssd  {ssd['samples_per_s']:9.0f} samples/s ({step_ms(ssd):6.1f} ms/step, ssd wait "
      f"{1e3 * ssd['phases']['ssd wait'] / steps:.1f} ms/step) = {ssd['samples_per_s'] / dram['samples_per_s']:.2f}x DRAM")
h_dram, h_ssd = second_half(sys.argv[1]), second_half(sys.argv[2])
print(f"  second half: DRAM {h_dram:.0f}, ssd {h_ssd:.0f} samples/s = {h_ssd / h_dram:.2f}x DRAM")
if sys.argv[4]:
    m = re.search(r"steps (\d+), samples/s ([\d.]+), second half ([\d.]+), ms/step ([\d.]+)", sys.argv[4])
    t_steps, t_all, t_half, t_ms = int(m[1]), float(m[2]), float(m[3]), float(m[4])
    print(f"  torch mmap: {t_all:.0f} samples/s (second half {t_half:.0f}) = {t_all / dram['samples_per_s']:.2f}x DRAM,"
          f" ours/torch = {ssd['samples_per_s'] / t_all:.2f} (second half {h_ssd / t_half:.2f}; {t_ms:.1f} ms/step,"
          f" {t_steps} steps)")
# WRITTEN=1: model.init_from wrote every row once, computing each first (a
# row never written is computed when first touched, then overwritten): those
# are not the steps' misses.
written_first = int(sys.argv[6]) * sum(t["rows"] for t in ssd["tables"] if "ssd" in t)
computed, read = total("rows_computed") - written_first, total("rows_read")
print(f"  missed rows computed from their seed, not read: {computed} of {computed + read}"
      + (" (a warm-up: most misses were not reads)" if computed > read else "")
      + (" (every row written before the first step)" if written_first else ""))
print(f"  ssd hit rate {hits / asked:.3f}; per step {requests / steps:.0f} requests: {fetch_reads / steps:.0f} block"
      f" reads of missed rows, {total('writes') / steps:.1f} segment writes ({written / steps / (1 << 20):.2f} MiB),"
      f" {(total('reads') - fetch_reads) / steps:.1f} other reads; tier CPU {1e6 * total('cpu_s') / max(1, requests):.1f}"
      f" us/request ({1e3 * total('cpu_s') / steps:.1f} ms/step)")
print(f"  I/O floor {floor_ms:.1f} ms/step (reads at the disk's {limit:.0f}/s, writes at {seqwrite / (1 << 20):.0f} MiB/s);"
      f" step {step_ms(ssd) / floor_ms:.2f}x the floor, {step_ms(ssd) / max(floor_ms, step_ms(dram)):.2f}x"
      f" max(floor, DRAM step)")
wa = [t["write_amplification"] for t in tables]
print(f"  write amplification {min(wa):.3f}-{max(wa):.3f} (bytes written / dirty row bytes), collector moved"
      f" {total('collector_bytes_moved') / (1 << 20):.1f} MiB, file {total('file_bytes') / (1 << 30):.2f} GiB"
      f" for {total('live_bytes') / (1 << 30):.2f} GiB of live rows")
same = dram["losses_digest"] == ssd["losses_digest"] and dram["steps"] == ssd["steps"]
print(f"  step losses bit-identical: {'yes' if same else 'NO'} ({dram['losses_digest']} vs {ssd['losses_digest']},"
      f" {dram['steps']} steps)")
EOF
done
