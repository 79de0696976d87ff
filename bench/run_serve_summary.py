#!/usr/bin/env python3
"""bench/run_serve.sh's figures against issue 33's section 4 targets, read from its logs.

  /usr/bin/python3 bench/run_serve_summary.py OUT/logs

Reads what each phase kept (OUT/logs/<phase>*.txt; a phase not run is
skipped) and prints:
  - the Kaggle model in DRAM, C++ predictor (predictor_bench) against torch
    eager (torch_serve_bench.py closed): the best samples/s at each batch over
    both ways of using the cores and 1 or 2 clients (which one is said), and
    the p50 of one client (the better way), with the ratios and the targets
    (>= 2x samples/s at 256 and 2048, >= 3x lower p50 at 1 and 16);
  - the max QPS of each open-loop sweep, with the p99 at 70% of it;
  - the ssd sweeps against their targets: Zipf max QPS >= 0.8 x min(the
    DRAM model's max QPS, drive reads/s / reads per request), uniform
    reads/s >= 0.8 x the drive's, p99 at 70% of max QPS <= 10 ms, the hit
    rate against the best possible, rows made from the seed on first use
    (0), and against torch.from_file's max QPS (aim >= 5x). A read is one
    request of the tier (a run of adjacent 4 KiB blocks; one block for a
    random row), the drive's rate random 4 KiB reads.
  - dlrm-serve (issue 34): its max QPS against the in-process predictor's on
    the same model and traffic (>= 0.75x) and its p99 at 70% (<= 15 ms), all
    in DRAM and served in place; the max QPS and p99 at 70% of each
    --max_batch / --max_wait_us; with --max_queue MAX_QUEUE, 70% of the DRAM max QPS
    (the CPU each side spends) and twice it (503s, the admitted requests'
    p99); a reload under load at half of it (failed requests,
    p99 before, across and after).
The load lines are serve_load_bench's and torch_serve_bench.py open's
columns: offered/s achieved/s kept-up samples/s p50 p99 p99.9 late dropped
[cpu] [hit rate reads/s reads/req lazy rows | majflt/s flt/req] pass.
"""
import os
import re
import sys


def read(logs, name):
    path = os.path.join(logs, name)
    return open(path).read() if os.path.exists(path) else None


def closed_rows(text):
    """(mode, batch, clients, samples/s, p50 us, p99 us) of a closed-loop table."""
    rows = []
    for line in (text or "").splitlines():
        m = re.match(r"(request-level|batch-level)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            rows.append((m[1], int(m[2]), int(m[3]), float(m[4]), float(m[5]), float(m[6])))
    return rows


def best(rows, batch):
    """The best samples/s at `batch` and the p50 of one client, each with how it was served."""
    at = [r for r in rows if r[1] == batch]
    if not at:
        return None
    top = max(at, key=lambda r: r[3])
    one = min((r for r in at if r[2] == 1), key=lambda r: r[4], default=top)
    return top[3], f"{top[0]}, {top[2]} clients", one[4], one[0]


def load_lines(text):
    """(the numbers of a measured rate's line, its pass word, whether it is the 70% line), in order."""
    out = []
    for line in (text or "").splitlines():
        seventy = "(70% of max QPS)" in line
        f = line.replace("(70% of max QPS)", "").split()
        if len(f) < 10 or f[-1] not in ("yes", "no"):
            continue
        try:
            out.append(([float(x) for x in f[:-1]], f[-1], seventy))
        except ValueError:
            continue
    return out


def max_qps(text):
    m = re.search(r"^max QPS: ([\d.]+) requests/s", text or "", re.M)
    return float(m[1]) if m else None


def at_max(text, qps):
    """The passing line measured at the max QPS, and the line at 70% of it."""
    lines = load_lines(text)
    hit = [l for l in lines if not l[2] and l[1] == "yes" and qps is not None and abs(l[0][0] - qps) < 0.051]
    seventy = [l for l in lines if l[2]]
    return (hit[-1][0] if hit else None), (seventy[-1][0] if seventy else None)


def http_lines(text):
    """serve_http_load's measurement lines as dicts of their numbers."""
    out = []
    for line in (text or "").splitlines():
        if line.startswith("serve_http_load: offered_qps"):
            f = line.split()[1:]
            out.append({k: float(v) for k, v in zip(f[::2], f[1::2])})
    return out


def http_max(text):
    """serve_http_load --find_max's max QPS and its line at 70% of it (the last one)."""
    lines = http_lines(text)
    return max_qps(text), (lines[-1] if lines and max_qps(text) else None)


def http_summary(logs):
    print()
    print("## dlrm-serve (issue 34): the protocol's cost, batching, overload, reload")
    for case, inproc, http in (("all in DRAM", "http-dram-inprocess.txt", "http-dram.txt"),
                               ("served in place, memlimit", "http-ssd-inprocess.txt", "http-ssd.txt")):
        a, b = read(logs, inproc), read(logs, http)
        if a is None or b is None:
            continue
        q_in, (q_http, seventy) = max_qps(a), http_max(b)
        ratio = q_http / q_in if q_in and q_http else None
        p99 = seventy["p99_ms"] if seventy else None
        print(f"- {case}: in-process max QPS {fmt(q_in, ',.1f')}, dlrm-serve {fmt(q_http, ',.1f')} = "
              f"{fmt(ratio, '.2f')}x (target >= 0.75: {'met' if ratio and ratio >= 0.75 else 'MISSED'}); "
              f"p99 at 70% {fmt(p99, '.2f')} ms (target <= 15: {'met' if p99 is not None and p99 <= 15 else 'MISSED'})")
    rows = []
    for name in sorted(os.listdir(logs)):
        m = re.match(r"http-batching-(\d+)-(\d+)\.txt$", name)
        if m:
            q, seventy = http_max(read(logs, name))
            rows.append((int(m[1]), int(m[2]), q, seventy["p99_ms"] if seventy else None))
    if rows:
        print("- batching, the Kaggle model, 1-sample requests, uniform rows:")
        print("  | --max_batch | --max_wait_us | max QPS | p99 ms at 70% |")
        print("  |---:|---:|---:|---:|")
        for batch, wait, q, p99 in sorted(rows):
            print(f"  | {batch} | {wait} | {fmt(q, ',.1f')} | {fmt(p99, '.2f')} |")
    overload = []  # (queue, offered, its log's text): 70% of the max QPS, then twice it
    for name in os.listdir(logs):
        m = re.match(r"http-overload-q(\d+)-([\d.]+)\.txt$", name)
        if m:
            overload.append((int(m[1]), float(m[2]), read(logs, name)))
    for queue, offered, text in sorted(overload):
        lines = http_lines(text)
        if not lines:
            continue
        o = lines[-1]
        cpu = re.findall(r"^(load generator CPU: .*|dlrm-serve CPU: .*)$", text, re.M)
        print(f"- --max_queue {queue}, {offered:,.0f}/s offered: {o['achieved_qps']:,.0f}/s answered 200 "
              f"(p99 {o['p99_ms']:.2f} ms), {o['status_503']:,.0f} answered 503 (p99 {o['p99_503_ms']:.2f} ms), "
              f"{o['failed']:,.0f} failed; {'; '.join(cpu)}")
    for phase in ("before", "across", "after"):
        lines = http_lines(read(logs, f"http-reload-{phase}.txt"))
        if lines:
            r = lines[-1]
            print(f"- reload at {r['offered_qps']:,.1f}/s, {phase} the swap: {r['ok']:,.0f} ok, p99 {r['p99_ms']:.2f} ms, "
                  f"p99.9 {r['p999_ms']:.2f} ms, max {r['max_ms']:.2f} ms, 503s {r['status_503']:,.0f}, "
                  f"failed {r['failed'] + r['other_errors']:,.0f}")


def fmt(x, spec=",.0f"):
    return "-" if x is None else format(x, spec)


def main():
    logs = sys.argv[1]
    print("## The Kaggle model in DRAM: C++ predictor against torch eager (closed loop)")
    cemb, torch = closed_rows(read(logs, "dram-cemb.txt")), closed_rows(read(logs, "dram-torch.txt"))
    if cemb and torch:
        print("| batch | cemb samples/s | torch samples/s | ratio | cemb p50 us (1 client) | torch p50 us | ratio "
              "| target |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|")
        for b in (1, 16, 256, 2048):
            c, t = best(cemb, b), best(torch, b)
            if not c or not t:
                continue
            target = ">= 2x samples/s" if b >= 256 else ">= 3x lower p50"
            met = (c[0] / t[0] >= 2) if b >= 256 else (t[2] / c[2] >= 3)
            print(f"| {b} | {c[0]:,.0f} ({c[1]}) | {t[0]:,.0f} ({t[1]}) | {c[0] / t[0]:.2f} | {c[2]:,.1f} ({c[3]}) | "
                  f"{t[2]:,.1f} ({t[3]}) | {t[2] / c[2]:.2f} | {target}: {'met' if met else 'MISSED'} |")
    print()
    print("## Max QPS, open loop (answers >= 0.99 x arrivals, p99 <= 25 ms)")
    print("| run | max QPS | samples/s | p99 ms at 70% of it |")
    print("|---|---:|---:|---:|")
    names = [f"dram-open-{s}.txt" for s in (1, 16, 256, 2048)] + ["ssd-dram.txt", "ssd-zipf-2g.txt",
                                                                   "ssd-zipf-512m.txt", "ssd-uniform-2g.txt",
                                                                   "torch-ssd-zipf.txt", "torch-ssd-zipf-random.txt",
                                                                   "torch-ssd-uniform.txt",
                                                                   "torch-ssd-uniform-random.txt"]
    found = {}
    for n in names:
        text = read(logs, n)
        if text is None:
            continue
        q = max_qps(text)
        line, seventy = at_max(text, q)
        found[n] = (q, line, seventy, text)
        samples = line[3] if line else None
        print(f"| {n[:-4]} | {fmt(q, ',.1f')} | {fmt(samples)} | {fmt(seventy[5] if seventy else None, '.2f')} |")
    print()
    drive = read(logs, "drive.txt")
    m = re.search(r"^limit: (\d+) random", drive or "", re.M)
    limit = float(m[1]) if m else None
    print(f"## ssd targets (drive: {fmt(limit)} random 4 KiB reads/s at queue depth 64)")
    dram_qps = found.get("ssd-dram.txt", (None,))[0]
    for n, kind in (("ssd-zipf-2g.txt", "zipf"), ("ssd-zipf-512m.txt", "zipf"), ("ssd-uniform-2g.txt", "uniform")):
        if n not in found:
            continue
        q, line, seventy, text = found[n]
        bh = re.search(r"best possible hit rate .*: ([\d.]+)", text)
        lazy = [l[0][-1] for l in load_lines(text) if len(l[0]) >= 14]
        print(f"- {n[:-4]}: max QPS {fmt(q, ',.1f')}", end="")
        if line and len(line) >= 14:
            hit, reads_s, reads_req = line[10], line[11], line[12]
            print(f"; at it hit rate {hit:.4f} (best possible {bh[1] if bh else '?'}), {reads_s:,.0f} reads/s, "
                  f"{reads_req:.1f} per request", end="")
            if kind == "zipf" and limit and dram_qps and reads_req > 0:
                need = 0.8 * min(dram_qps, limit / reads_req)
                print(f"; target >= 0.8 x min({dram_qps:,.1f}, {limit:,.0f} / {reads_req:.1f}) = {need:,.1f}: "
                      f"{'met' if q >= need else 'MISSED'}", end="")
            if kind == "uniform" and limit:
                print(f"; target block reads/s >= 0.8 x {limit:,.0f} = {0.8 * limit:,.0f}: "
                      f"{'met' if reads_s >= 0.8 * limit else 'MISSED'}", end="")
        if seventy:
            print(f"; p99 at 70% {seventy[5]:.2f} ms (target <= 10: {'met' if seventy[5] <= 10 else 'MISSED'})", end="")
        print(f"; rows computed on first use: {int(max(lazy)) if lazy else '?'} (must be 0)")
    saturated = load_lines(read(logs, "ssd-uniform-2g-saturated.txt"))
    if saturated and limit:
        best_reads = max(l[0][11] for l in saturated if len(l[0]) >= 14)
        print(f"- uniform-2g past its max QPS: {best_reads:,.0f} reads/s = {best_reads / limit:.2f}x the drive's "
              f"(target >= 0.8x at saturation: {'met' if best_reads >= 0.8 * limit else 'MISSED'})")
    for ours, kind in (("ssd-zipf-2g.txt", "zipf"), ("ssd-uniform-2g.txt", "uniform")):
        # torch.from_file at its best: the better of the plain maps and madvise(RANDOM).
        theirs = [(found[t][0], t) for t in (f"torch-ssd-{kind}.txt", f"torch-ssd-{kind}-random.txt")
                  if t in found and found[t][0]]
        if ours in found and found[ours][0] and theirs:
            q, t = max(theirs)
            r = found[ours][0] / q
            print(f"- {ours[:-4]} against {t[:-4]} (torch's better): {found[ours][0]:,.1f} / {q:,.1f} = {r:.1f}x "
                  f"max QPS (aim >= 5x: {'met' if r >= 5 else 'MISSED'})")
    miss = read(logs, "miss.txt")
    if miss:
        print()
        print("## latency against cold misses (bench/miss_latency_bench: added p50 <= 1.2 x drive p50 + 100 us)")
        for line in miss.splitlines():
            if re.match(r"^\s+\d+ ", line) or line.startswith("   k"):
                print("    " + line.strip())
    http_summary(logs)


if __name__ == "__main__":
    main()
