#!/usr/bin/env python3
"""The least p99 latency a server of requests can give when the drive is its
only limit: Poisson arrivals at RATE requests/s, each request needing READS
block reads, the drive reading READS_PER_S of them a second however many are
in flight. Each request then holds the drive for READS / READS_PER_S seconds
at best; served one after another in arrival order (for requests of one size,
sharing the drive among those in flight only stretches the tail), its latency
is its wait plus that time (an M/D/1 queue, simulated by Lindley's recursion). CPU, the network and the
drive's own latency only add to it.

    python3 bench/fifo_bound.py --reads 377.7 --reads_per_s 73849 --rate 54.6

prints the service time, the drive's utilisation and the p50/p99/p99.9 of the
latency. Used for issue 33's uniform case (bench/history/serving.md).
"""
import argparse
import random


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reads", type=float, required=True, help="block reads a request (the misses)")
    p.add_argument("--reads_per_s", type=float, required=True, help="the drive's random 4 KiB reads/s")
    p.add_argument("--rate", type=float, required=True, help="requests/s offered (Poisson)")
    p.add_argument("--requests", type=int, default=400_000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    service = a.reads / a.reads_per_s
    if a.rate * service >= 1:
        raise SystemExit(f"fifo_bound: utilisation {a.rate * service:.2f} >= 1: the queue grows without end")
    rng = random.Random(a.seed)
    wait, latencies = 0.0, []
    for _ in range(a.requests):
        latencies.append(wait + service)
        wait = max(0.0, wait + service - rng.expovariate(a.rate))  # the next request's wait
    latencies.sort()
    q = lambda f: 1e3 * latencies[min(len(latencies) - 1, int(f * len(latencies)))]
    print(f"service {1e3 * service:.2f} ms, utilisation {a.rate * service:.2f}, latency p50 {q(0.5):.2f} ms, "
          f"p99 {q(0.99):.2f} ms, p99.9 {q(0.999):.2f} ms")


if __name__ == "__main__":
    main()
