# Sourced by the bench/run_*.sh scripts: the machine a result was measured
# on, as bench/RESULTS.md records it.
#
#   source bench/machine.sh
#   echo "== $(machine_line), load $(cut -d' ' -f1-3 /proc/loadavg)"

# "2026-11-27 01:42 UTC, <CPU model>, <N> cores, AMX" (or "no AMX").
machine_line() {
  echo "$(date -u '+%Y-%m-%d %H:%M') UTC, $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores," \
       "$(grep -q amx_tile /proc/cpuinfo && echo AMX || echo 'no AMX')"
}
