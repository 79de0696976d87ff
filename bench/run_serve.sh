#!/usr/bin/env bash
# The serving sitting of issue 33, section 4, end to end: makes the two
# checkpoints, measures the C++ predictor and PyTorch on the same models in
# one sitting, and prints every figure bench/RESULTS.md's entry needs, with a
# summary against the issue's targets at the end.
#
#   sudo bash bench/run_serve.sh OUT                  # everything (as root: memlimit needs it)
#   sudo bash bench/run_serve.sh OUT dram ssd         # some phases again (the checkpoints in OUT are kept)
#
# OUT must be on the drive under test (not tmpfs): the ssd checkpoint, the
# drive's read test go there. The checkpoints made
# there are used again by later runs whatever the settings: remove OUT/kaggle
# or OUT/ssd to make one again (e.g. with another KAGGLE_MAX_IND_RANGE). Disk:
# about 35 GB while the ssd model is made, 20 GB after. Phases, in order
# (default: all); the output of each is kept in OUT/logs/<phase>*.txt:
#   prepare   OUT/kaggle: the Kaggle-shaped model (configs/bench-kaggle.yaml,
#             configs/kaggle.yaml's model: 26 tables of the Kaggle cardinalities
#             capped at KAGGLE_MAX_IND_RANGE, 0 = none: 33.8 M rows, 2.2 GB; dim
#             16, bottom 512-256-64-16, top 512-256-1, dot, fp32 MLPs) trained 1
#             step on its synthetic uniform data (the accuracy is irrelevant to
#             speed) into OUT/kaggle/ck, exported as .npy into OUT/kaggle/npy
#             (the same weights).
#             OUT/ssd: configs/bench-ssd.yaml's model (8 tables x 4 M rows x 64,
#             fp32: 7.6 GiB; bottom 512-256-64, top 512-512-256-1) with EVERY
#             row written: run A (tables on ssd, rows computed from the seed
#             when first used) exports its initial weights as .npy; run B
#             imports them (model.init_from: every row written through the ssd
#             tables), trains 1 step and checkpoints (each table's snapshot
#             holds every row: its size says so) into OUT/ssd/ck, and
#             exports the weights torch maps into OUT/ssd/npy. So a miss while
#             serving is a real read, never a row computed on first use (the
#             load bench's "lazy rows" column stays 0).
#   check     torch's scores of both models against cemb.serve.Predictor's
#             (bench/torch_serve_bench.py check, to 1e-5).
#   drive     the drive's random 4 KiB O_DIRECT read rate at queue depth 64
#             over an 8 GiB file, the tables' size (bench/ssd_bench --limit_only 1).
#   dram      the cores' fp32 multiply-add peak (bench/fma_peak: the limit
#             of the MLPs' GFLOP/s), then the Kaggle model in DRAM, closed
#             loop, batch 1, 16, 256, 2048,
#             1 and 2 clients: bench/predictor_bench (request-level and
#             batch-level) against torch_serve_bench.py closed (the same two
#             ways, OpenBLAS at its best core); each client cycles through
#             POOL requests of uniform rows.
#   dram-open the Kaggle model's max QPS, open loop (bench/serve_load_bench
#             --find_max), requests of 1, 16, 256 and 2048 samples, uniform rows.
#   ssd-dram  the bench-ssd model all in DRAM (no cap): max QPS at requests of
#             64 samples, Zipf(1.05): "the DRAM model's max QPS" of the targets.
#   ssd       the bench-ssd model's tables served in place from the
#             checkpoint's snapshots (PredictorOptions::ssd_cache_bytes) under
#             memlimit CAP: max QPS at 64 samples for Zipf(1.05) with a 2 GiB
#             and a 512 MiB budget, and uniform (2 GiB): hit rate (and the best
#             possible), reads/s and per request, p99 at 70% of max QPS;
#             then uniform at 2x and 4x its max QPS: the reads/s the tier gets
#             out of the drive when the p99 bound is set aside.
#   miss      bench/miss_latency_bench on OUT/ssd/ck under memlimit CAP: the
#             latency k = 1, 8, 26 cold misses add to one request, against the
#             drive's own time for k concurrent 4 KiB reads (queue depth k).
#   torch-ssd the same model in PyTorch with the tables torch.from_file maps of
#             OUT/ssd/npy (dropped from the page cache, then PREWARM seconds of
#             load), under the same cap, the same open loop: Zipf(1.05) and
#             uniform; as torch.from_file maps them, and with madvise(RANDOM)
#             (a fault then reads its page, not read_ahead_kb around it).
#   http-dram the protocol's cost (issue 34), all in DRAM: dlrm-serve
#             --dram_tables on OUT/ssd/ck against serve_load_bench
#             --dram_tables, max QPS and p99 at 70% of it, 64 samples,
#             Zipf(1.05); then a server with --max_queue MAX_QUEUE at 70% of that
#             max QPS (the CPU each side spends) and at twice it (overload:
#             503s at once, the admitted requests' p99).
#   http-batching the Kaggle model over HTTP, requests of 1 sample, uniform
#             rows: max QPS and p99 at 70% for each --max_batch and
#             --max_wait_us of BATCHING ("1:0 32:0 32:200 ...").
#   http-ssd  the same as http-dram with the tables served in place under
#             memlimit CAP (ssd_cache_bytes 2 GiB, PREWARM seconds of load
#             first, in both), then a reload under load: 1 GiB of cache
#             (two models are open during the swap), HTTP at half the max QPS
#             while LATEST moves to a hard-linked copy of the checkpoint
#             (removed after): p99 before, across and after the swap, and
#             failed requests.
#   formats   smaller rows for serving (issue 35): OUT/ssd/ck converted by
#             dlrm-convert into OUT/ssd-FORMAT (int8, fp16, bf16; kept), then
#             for each format and fp32 (OUT/ssd/ck) the ssd zipf-512m sweep:
#             tables served in place, ssd_cache_bytes 512 MiB, Zipf(1.05),
#             memlimit CAP: max QPS and hit rate (logs/formats-FORMAT.txt).
#   formats-auc configs/default.yaml (Kaggle-shaped, synthetic data)
#             trained into OUT/formats-auc, converted to each format, and
#             bench/format_quality's validation AUC and log loss of each.
#
# Environment: BUILD_DIR (build), PYTHON (/usr/bin/python3: Debian's, with
# torch and numpy), CAP (3G), MEMLIMIT (../shared/tools/memlimit),
# RATE_SECONDS (10: measured seconds per rate), WARMUP (3: seconds of the same
# load before each), PREWARM (150: closed-loop seconds before an ssd or
# torch-ssd sweep, to fill the cache: 2 GiB holds 8.4 M rows, and 20 s of
# it read 1.4 M on this drive, leaving the hit rate climbing through the
# search; 150 s gave 0.92 of a best possible 0.94), POOL (64), KAGGLE_MAX_IND_RANGE (0),
# SSD_ROWS (4000000: rows per table of the ssd model), BUDGETS ("2147483648
# 536870912": the ssd sweeps' two budgets in bytes; the logs keep the names
# zipf-2g and zipf-512m), DRIVE_ROWS (33554432: the drive test's file, 8 GiB),
# JOBS (the build's parallel jobs: nproc), TORCH_LD_LIBRARY_PATH (put first in
# torch's LD_LIBRARY_PATH: a libopenblas0-pthread's directory, where OpenBLAS
# is unpacked rather than installed), TORCH_PROCS (2) and TORCH_THREADS (4:
# torch's open-loop processes, and request threads in each), TORCH_MADVISE
# ("none random": torch-ssd runs with each; none is what torch.from_file
# gives, random turns off the read-around of a fault, read_ahead_kb),
# BATCHING (http-batching's max_batch:max_wait_us pairs), MAX_QUEUE (8: the
# overload step's --max_queue, about the DRAM max QPS x 5 ms).
# torch needs OpenBLAS for its sgemm (apt-get install libopenblas0; Debian's
# python3-torch alone brings the netlib reference BLAS, ~40x slower, which
# torch_serve_bench.py refuses).
# A smoke run of the whole script (tiny shapes, a fraction of a second per
# rate: it proves the tools, it measures nothing):
#   KAGGLE_MAX_IND_RANGE=1000 SSD_ROWS=65536 BUDGETS="4194304 1048576" DRIVE_ROWS=262144 RATE_SECONDS=0.3 \
#     WARMUP=0.1 PREWARM=0.5 POOL=4 bash bench/run_serve.sh /work/tmp/serve-smoke
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
[[ $# -ge 1 ]] || { sed -n '2,60p' "$0"; exit 2; }
OUT=$(realpath -m "$1")
shift
phases=("$@")
((${#phases[@]})) || phases=(prepare check drive dram dram-open ssd-dram ssd miss torch-ssd http-dram http-batching http-ssd formats
  formats-auc)
BUILD_DIR=${BUILD_DIR:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
CAP=${CAP:-3G}
MEMLIMIT=${MEMLIMIT:-$(realpath ../shared/tools/memlimit)}
SECONDS_PER_RATE=${RATE_SECONDS:-10}
WARMUP=${WARMUP:-3}
PREWARM=${PREWARM:-150}
POOL=${POOL:-64}
KAGGLE_MAX_IND_RANGE=${KAGGLE_MAX_IND_RANGE:-0}
SSD_ROWS=${SSD_ROWS:-4000000}
DRIVE_ROWS=${DRIVE_ROWS:-33554432}
JOBS=${JOBS:-$(nproc)}
BUDGETS=${BUDGETS:-2147483648 536870912}
TORCH_PROCS=${TORCH_PROCS:-2}
TORCH_THREADS=${TORCH_THREADS:-4}
TORCH_MADVISE=${TORCH_MADVISE:-none random}
BATCHING=${BATCHING:-1:0 32:0 32:200 32:1000 256:0 256:200 256:1000}
MAX_QUEUE=${MAX_QUEUE:-8}
logs=$OUT/logs
mkdir -p "$logs"

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target dlrm-train ssd_bench fma_peak predictor_bench serve_load_bench miss_latency_bench cemb_python \
  cemb_serve_python dlrm-serve serve_http_load dlrm-convert format_quality >/dev/null
bin=$BUILD_DIR/bench
train=$BUILD_DIR/apps/dlrm-train
torch_bench() {  # torch_serve_bench.py with torch's environment
  LD_LIBRARY_PATH=${TORCH_LD_LIBRARY_PATH:+$TORCH_LD_LIBRARY_PATH:}${LD_LIBRARY_PATH:-} \
    PYTHONPATH=$BUILD_DIR/python "$PYTHON" bench/torch_serve_bench.py "$@"
}
load_bench() { "$bin/serve_load_bench" --seconds "$SECONDS_PER_RATE" --warmup_seconds "$WARMUP" "$@"; }
has() { local p; for p in "${phases[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }
max_qps() { sed -n 's/^max QPS: \([0-9.]*\) .*/\1/p' "$1" | tail -n 1; }  # of a --find_max log
banner() { echo; echo "== $1: $(machine_line), load $(cut -d' ' -f1-3 /proc/loadavg)"; }
run() {  # run LOG COMMAND...: prints the command, runs it, keeps its output in LOG
  local log=$1; shift
  echo "\$ $*" | tee "$log"
  "$@" 2>&1 | tee -a "$log"
}

banner "sitting in $OUT ($(findmnt -n -o SOURCE,FSTYPE -T "$OUT" | tr -s ' '))"
dev=$(findmnt -n -o MAJ:MIN -T "$OUT" | tr -d ' ' || true)
echo "read_ahead_kb of the drive: $(cat "/sys/dev/block/$dev/queue/read_ahead_kb" 2>/dev/null ||
  cat "/sys/dev/block/$dev/../queue/read_ahead_kb" 2>/dev/null || echo '?')"

kaggle=$OUT/kaggle ssd=$OUT/ssd
if has prepare; then
  banner prepare
  if [[ ! -f $kaggle/ck/LATEST || ! -f $kaggle/npy/top_l.4.bias.npy ]]; then
    rm -rf "$kaggle" && mkdir -p "$kaggle"
    run "$logs/prepare-kaggle.txt" "$train" --config configs/bench-kaggle.yaml --set data.samples=24576 \
      --set data.max_ind_range="$KAGGLE_MAX_IND_RANGE" --set data.work_dir="$kaggle/data" --set train.steps=1 \
      --set train.checkpoint_dir="$kaggle/ck" --export "$kaggle/npy"
    rm -rf "$kaggle/data"
  fi
  echo "kaggle: $(du -sh "$kaggle/ck" | cut -f1) checkpoint, $(du -sh "$kaggle/npy" | cut -f1) of .npy"
  if [[ ! -f $ssd/ck/LATEST || ! -f $ssd/npy/top_l.6.bias.npy ]]; then
    rm -rf "$ssd" && mkdir -p "$ssd/tier"
    common=(--config configs/bench-ssd.yaml --set model.tables.rows="$SSD_ROWS"
            --set data.samples=24576 --set data.work_dir="$ssd/data"
            --set model.storage.kind=ssd --set model.storage.slow_tier="$ssd/tier" --set model.dram_budget=2GiB
            --set train.steps=1)
    run "$logs/prepare-ssd-init.txt" "$train" "${common[@]}" --export "$ssd/npy-init"
    run "$logs/prepare-ssd.txt" "$train" "${common[@]}" --set model.init_from="$ssd/npy-init" \
      --set train.checkpoint_dir="$ssd/ck" --export "$ssd/npy"
    rm -rf "$ssd/npy-init" "$ssd/data" "$ssd/tier"
  fi
  # Every row in the snapshot: a format-2 snapshot of n rows is 4 KiB of header,
  # n 4-byte ids (to a multiple of 4 KiB), then n rows (docs/ssd.md).
  step=$(cat "$ssd/ck/LATEST")
  want=$((4096 + (SSD_ROWS * 4 + 4095) / 4096 * 4096 + SSD_ROWS * 256))
  for f in "$ssd/ck/$step"/model/emb_l.*.ssd; do
    if [[ $(stat -c %s "$f") != "$want" ]]; then
      echo "run_serve.sh: $f holds $(stat -c %s "$f") bytes, not the $want of $SSD_ROWS rows of 256 bytes:" \
        "not every row was written" >&2
      exit 1
    fi
  done
  echo "ssd: $(du -sh "$ssd/ck" | cut -f1) checkpoint ($(ls "$ssd/ck/$step"/model/emb_l.*.ssd | wc -l)" \
    "snapshots of all $SSD_ROWS rows x 256 B), $(du -sh "$ssd/npy" | cut -f1) of .npy"
fi

if has check; then
  banner check
  run "$logs/check-kaggle.txt" torch_bench check --npy "$kaggle/npy" --checkpoint "$kaggle/ck" --samples 1000
  run "$logs/check-ssd.txt" torch_bench check --npy "$ssd/npy" --checkpoint "$ssd/ck" --samples 1000
fi

if has drive; then
  banner "drive ($DRIVE_ROWS rows x 256 B file, random 4 KiB reads)"
  mkdir -p "$OUT/drive"
  run "$logs/drive.txt" "$bin/ssd_bench" --limit_only 1 --dir "$OUT/drive" --rows "$DRIVE_ROWS"
  rm -rf "$OUT/drive"
fi

if has dram; then
  banner "dram: the Kaggle model, closed loop"
  run "$logs/fma-peak.txt" "$bin/fma_peak"  # the cores' fp32 limit: the MLPs' GFLOP/s are read against it
  run "$logs/dram-cemb.txt" "$bin/predictor_bench" --checkpoint "$kaggle/ck" --batches 1,16,256,2048 --clients 1,2 \
    --max_batch 2048 --pool "$POOL" --seconds "$SECONDS_PER_RATE"
  run "$logs/dram-torch.txt" torch_bench closed --npy "$kaggle/npy" --checkpoint "$kaggle/ck" \
    --batches 1,16,256,2048 --clients 1,2 --pool "$POOL" --seconds "$SECONDS_PER_RATE"
fi

if has dram-open; then
  banner "dram-open: the Kaggle model, open loop"
  for s in 1 16 256 2048; do
    run "$logs/dram-open-$s.txt" load_bench --checkpoint "$kaggle/ck" --samples "$s" --alpha 0 --max_batch 2048 \
      --find_max --start_rate $((16000 / s > 4 ? 16000 / s : 4))
  done
fi

if has ssd-dram; then
  banner "ssd-dram: the bench-ssd model all in DRAM (no cap)"
  run "$logs/ssd-dram.txt" load_bench --checkpoint "$ssd/ck" --dram_tables --samples 64 --alpha 1.05 --find_max \
    --start_rate 200
fi

if has ssd; then
  read -r big small <<< "$BUDGETS"
  for case in "zipf-2g 1.05 $big" "zipf-512m 1.05 $small" "uniform-2g 0 $big"; do
    read -r name alpha budget <<< "$case"
    banner "ssd $name: tables served in place from their snapshots, ssd_cache_bytes $budget, under memlimit $CAP"
    run "$logs/ssd-$name.txt" "$MEMLIMIT" "$CAP" "$bin/serve_load_bench" --seconds "$SECONDS_PER_RATE" \
      --warmup_seconds "$WARMUP" --checkpoint "$ssd/ck" --samples 64 --alpha "$alpha" \
      --ssd_cache_bytes "$budget" --prewarm_seconds "$PREWARM" --find_max --start_rate 50
  done
  # Past the max QPS (the p99 bound set aside): the reads/s the tier gets
  # out of the drive with uniform rows.
  max=$(max_qps "$logs/ssd-uniform-2g.txt")
  [[ -n $max ]] && run "$logs/ssd-uniform-2g-saturated.txt" "$MEMLIMIT" "$CAP" "$bin/serve_load_bench" \
    --seconds "$SECONDS_PER_RATE" --warmup_seconds "$WARMUP" --checkpoint "$ssd/ck" --samples 64 --alpha 0 \
    --ssd_cache_bytes "$big" --prewarm_seconds 60 \
    --rates "$(awk -v q="$max" 'BEGIN { printf "%.0f,%.0f", 2 * q, 4 * q }')"
fi

if has miss; then
  banner "miss: the latency k cold misses add to a request, against the drive's k concurrent reads, under memlimit $CAP"
  run "$logs/miss.txt" "$MEMLIMIT" "$CAP" "$bin/miss_latency_bench" --checkpoint "$ssd/ck" --ks 1,8,26 --trials 200
fi

if has torch-ssd; then
  for case in "zipf 1.05" "uniform 0"; do
    for advice in $TORCH_MADVISE; do
      read -r name alpha <<< "$case"
      log=$logs/torch-ssd-$name$([[ $advice == none ]] || echo "-$advice").txt
      banner "torch-ssd $name: torch.from_file maps (madvise $advice) under memlimit $CAP"
      run "$log" env LD_LIBRARY_PATH="${TORCH_LD_LIBRARY_PATH:+$TORCH_LD_LIBRARY_PATH:}${LD_LIBRARY_PATH:-}" \
        PYTHONPATH="$BUILD_DIR/python" "$MEMLIMIT" "$CAP" "$PYTHON" bench/torch_serve_bench.py open \
        --npy "$ssd/npy" --checkpoint "$ssd/ck" --tables from_file --madvise "$advice" --samples 64 --alpha "$alpha" \
        --procs "$TORCH_PROCS" --threads "$TORCH_THREADS" --seconds "$SECONDS_PER_RATE" --warmup_seconds "$WARMUP" \
        --prewarm_seconds "$PREWARM" --find_max --start_rate 10
    done
  done
fi

# dlrm-serve in the background (serve_up NAME [PREFIX... --] ARGS...: PREFIX
# e.g. memlimit), its output in logs/NAME-serve.txt; sets $url and returns
# once it is ready (the model open).
serve_up() {
  local name=$1 prefix=() i; shift
  if [[ " $* " == *" -- "* ]]; then
    while [[ $1 != -- ]]; do prefix+=("$1"); shift; done
    shift
  fi
  local log=$logs/$name-serve.txt
  echo "\$ ${prefix[*]} dlrm-serve --port 0 $*" | tee "$log.cmd"
  "${prefix[@]}" "$BUILD_DIR/apps/dlrm-serve" --port 0 "$@" > "$log" 2>&1 &
  url=
  for ((i = 0; i < 1200; ++i)); do  # it listens at once, and is ready once the model is open
    [[ -n $url ]] || url=$(grep -o 'listening on http://[0-9.:]*' "$log" | cut -d' ' -f3 || true)
    [[ -n $url ]] && curl -sf "$url/v2/health/ready" >/dev/null && return 0
    sleep 0.5
  done
  echo "run_serve.sh: dlrm-serve is not ready:" >&2; cat "$log" >&2; return 1
}
serve_down() {  # SIGTERM to dlrm-serve (not to memlimit, which waits for it); its log's tail
  pkill -TERM -x dlrm-serve || true
  wait || true
  tail -n 3 "$logs/$1-serve.txt"
}
http_load() { "$bin/serve_http_load" --url "$url" --seconds "$SECONDS_PER_RATE" --warmup_seconds "$WARMUP" "$@"; }
# The server's defaults, but many HTTP threads: the load generator's
# connections (each holds one) must exceed the rate x the p99.
serve_flags=(--http_threads 128 --max_queue 512)

if has http-dram; then
  banner "http-dram: dlrm-serve against the in-process predictor, bench-ssd all in DRAM, 64 samples, Zipf(1.05)"
  run "$logs/http-dram-inprocess.txt" load_bench --checkpoint "$ssd/ck" --dram_tables --samples 64 --alpha 1.05 \
    --find_max --start_rate 200
  serve_up http-dram "${serve_flags[@]}" --checkpoint "$ssd/ck" --dram_tables --no_verify --reload_poll_s 0
  run "$logs/http-dram.txt" http_load --samples 64 --alpha 1.05 --connections 64 --find_max --start_rate 200 || true
  serve_down http-dram
  # Overload: a queue sized to a latency (about max QPS x the wait accepted),
  # more connections than it holds, twice the max QPS; and at 70% of it the
  # CPU each side spends (the server's from /proc, the generator's from time).
  max=$(max_qps "$logs/http-dram.txt")
  if [[ -n $max ]]; then
    serve_up http-overload --checkpoint "$ssd/ck" --dram_tables --no_verify --reload_poll_s 0 \
      --http_threads 256 --http_queue 64 --max_queue "$MAX_QUEUE"
    pid=$(pgrep -x dlrm-serve)
    for q in $(awk -v q="$max" 'BEGIN { print 0.7 * q, 2 * q }'); do
      t0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
      run "$logs/http-overload-q$MAX_QUEUE-$q.txt" /usr/bin/time -f "load generator CPU: %U user + %S system seconds over %e s" \
        "$bin/serve_http_load" --url "$url" --seconds "$SECONDS_PER_RATE" --warmup_seconds "$WARMUP" --samples 64 \
        --alpha 1.05 --connections 200 --qps "$q" || true
      t1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
      echo "dlrm-serve CPU: $(awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN { print (b - a) / hz }')" \
        "seconds over the same run" | tee -a "$logs/http-overload-q$MAX_QUEUE-$q.txt"
    done
    serve_down http-overload
  fi
fi

if has http-batching; then
  for pair in $BATCHING; do
    IFS=: read -r batch wait_us <<< "$pair"
    banner "http-batching: the Kaggle model, 1-sample requests, --max_batch $batch --max_wait_us $wait_us"
    serve_up "http-batching-$batch-$wait_us" "${serve_flags[@]}" --checkpoint "$kaggle/ck" --no_verify \
      --reload_poll_s 0 --max_batch "$batch" --max_wait_us "$wait_us"
    run "$logs/http-batching-$batch-$wait_us.txt" http_load --samples 1 --alpha 0 --connections 100 --find_max \
      --start_rate 1000 --precision 0.1 || true
    serve_down "http-batching-$batch-$wait_us"
  done
fi

if has http-ssd; then
  read -r big small <<< "$BUDGETS"
  banner "http-ssd: dlrm-serve against the in-process predictor, tables served in place, under memlimit $CAP"
  run "$logs/http-ssd-inprocess.txt" "$MEMLIMIT" "$CAP" "$bin/serve_load_bench" --seconds "$SECONDS_PER_RATE" \
    --warmup_seconds "$WARMUP" --checkpoint "$ssd/ck" --samples 64 --alpha 1.05 --ssd_cache_bytes "$big" \
    --prewarm_seconds "$PREWARM" --find_max --start_rate 200
  serve_up http-ssd "$MEMLIMIT" "$CAP" -- "${serve_flags[@]}" --checkpoint "$ssd/ck" --ssd_cache_bytes "$big" \
    --no_verify --reload_poll_s 0
  # The cache filled as serve_load_bench's prewarm fills it (there closed
  # loop; here an open loop above what the server keeps up with).
  run "$logs/http-ssd-prewarm.txt" "$bin/serve_http_load" --url "$url" --samples 64 --alpha 1.05 --connections 64 \
    --qps 1500 --seconds "$PREWARM" --warmup_seconds 0 || true
  run "$logs/http-ssd.txt" http_load --samples 64 --alpha 1.05 --connections 64 --find_max --start_rate 200 || true
  curl -s "$url/metrics" | grep -E '^cemb_serve_ssd_(hit_rate|reads_total)' | tee -a "$logs/http-ssd.txt"
  serve_down http-ssd
  half=$(awk -v q="$(max_qps "$logs/http-ssd.txt")" 'BEGIN { printf "%.1f", q / 2 }')

  banner "http-ssd reload: HTTP at $half requests/s while LATEST moves (1 GiB of cache per model, memlimit $CAP)"
  step=$(cat "$ssd/ck/LATEST")
  copy=step-999999999
  rm -rf "${ssd:?}/ck/$copy"
  serve_up http-reload "$MEMLIMIT" "$CAP" -- "${serve_flags[@]}" --checkpoint "$ssd/ck" --ssd_cache_bytes 1073741824 \
    --reload_poll_s 1
  run "$logs/http-reload-before.txt" "$bin/serve_http_load" --url "$url" --samples 64 --alpha 1.05 --connections 64 \
    --qps "$half" --seconds 60 --warmup_seconds 30 || true
  ( sleep 10
    cp -al "$ssd/ck/$step" "$ssd/ck/$copy"
    echo "$copy" > "$ssd/ck/LATEST.tmp" && mv "$ssd/ck/LATEST.tmp" "$ssd/ck/LATEST"
    echo "LATEST -> $copy at $(date +%T)" ) &
  run "$logs/http-reload-across.txt" "$bin/serve_http_load" --url "$url" --samples 64 --alpha 1.05 --connections 64 \
    --qps "$half" --seconds 60 --warmup_seconds 0 --seed 7 || true
  wait %% 2>/dev/null || true
  run "$logs/http-reload-after.txt" "$bin/serve_http_load" --url "$url" --samples 64 --alpha 1.05 --connections 64 \
    --qps "$half" --seconds 30 --warmup_seconds 0 --seed 9 || true
  curl -s "$url/metrics" | grep -E '^cemb_serve_(reloads_total|model_version|ssd_hit_rate)' |
    tee -a "$logs/http-reload-after.txt"
  serve_down http-reload  # not in a pipeline: its `wait` must be this shell's
  grep -E 'reload|memlimit' "$logs/http-reload-serve.txt" | tee -a "$logs/http-reload-after.txt"
  echo "$step" > "$ssd/ck/LATEST.tmp" && mv "$ssd/ck/LATEST.tmp" "$ssd/ck/LATEST"
  rm -rf "${ssd:?}/ck/$copy"
fi

if has formats; then
  read -r big small <<< "$BUDGETS"
  for format in int8 fp16 bf16; do
    [[ -f $OUT/ssd-$format/LATEST ]] ||
      run "$logs/formats-convert-$format.txt" "$BUILD_DIR/apps/dlrm-convert" --checkpoint "$ssd/ck" --format "$format" \
        --out "$OUT/ssd-$format"
  done
  for format in fp32 int8 fp16 bf16; do
    ck=$OUT/ssd-$format
    [[ $format == fp32 ]] && ck=$ssd/ck
    banner "formats $format: tables served in place, ssd_cache_bytes $small, Zipf(1.05), under memlimit $CAP"
    run "$logs/formats-$format.txt" "$MEMLIMIT" "$CAP" "$bin/serve_load_bench" --seconds "$SECONDS_PER_RATE" \
      --warmup_seconds "$WARMUP" --checkpoint "$ck" --samples 64 --alpha 1.05 --ssd_cache_bytes "$small" \
      --prewarm_seconds "$PREWARM" --find_max --start_rate 50
  done
fi

if has formats-auc; then
  auc=$OUT/formats-auc
  sets=(--set "train.checkpoint_dir=$auc/ck" --set "data.work_dir=$auc/data")
  if [[ ! -f $auc/ck/LATEST ]]; then
    run "$logs/formats-auc-train.txt" "$train" --config configs/default.yaml "${sets[@]}" --set train.progress=false
  fi
  cks=(--checkpoint "$auc/ck")
  for format in int8 fp16 bf16; do
    [[ -f $auc/ck-$format/LATEST ]] ||
      "$BUILD_DIR/apps/dlrm-convert" --checkpoint "$auc/ck" --format "$format" --out "$auc/ck-$format" >/dev/null
    cks+=(--checkpoint "$auc/ck-$format")
  done
  banner "formats-auc: validation AUC of configs/default.yaml's model served from each format"
  run "$logs/formats-auc.txt" "$bin/format_quality" --config configs/default.yaml "${sets[@]}" "${cks[@]}" \
    --trainer_auc
fi

banner "summary (from $logs)"
"$PYTHON" bench/run_serve_summary.py "$logs"
