#!/usr/bin/env python3
"""Write amplification of the ssd tier's log under uniform overwrites, simulated.

The model of ssd/ssd_log.cc's collector, rows only: a log of segments of S
rows with room for FILE_SPACE x N rows plus 8 segments; each write appends a
row (its old copy becomes garbage); when fewer than 4 segments are free the
segment with the fewest live rows is collected (its live rows appended
again). Prints (rows written + rows moved) / rows written: the write
amplification without the segments' id area (4 bytes a row).

  python3 bench/log_gc_sim.py                       # file space 1.5, 2, 2.5, 3; steady state
  python3 bench/log_gc_sim.py --writes-per-row 9.8  # a run of that many writes per row, from empty
"""
import argparse
import random


def write_amplification(file_space, rows, segment_rows, writes, seed=1):
    rnd = random.Random(seed)
    nseg = int(file_space * rows / segment_rows + 0.999) + 8
    where = [-1] * rows                    # row -> segment of its live copy
    live = [0] * nseg
    members = [[] for _ in range(nseg)]    # rows appended to the segment (some dead by now)
    free = list(range(nseg))
    state = {"open": free.pop(), "fill": 0, "moved": 0}

    def append(row):
        if state["fill"] == segment_rows:
            state["open"], state["fill"] = free.pop(), 0
        if where[row] >= 0:
            live[where[row]] -= 1
        where[row] = state["open"]
        live[state["open"]] += 1
        members[state["open"]].append(row)
        state["fill"] += 1

    def collect():
        while len(free) < 4:
            free_set = set(free)
            victim = min((s for s in range(nseg) if s != state["open"] and s not in free_set), key=live.__getitem__)
            moving = [r for r in members[victim] if where[r] == victim]
            members[victim] = []
            for r in moving:
                append(r)
            state["moved"] += len(moving)
            live[victim] = 0
            free.insert(0, victim)

    for _ in range(writes):
        append(rnd.randrange(rows))
        if len(free) < 4:
            collect()
    return (writes + state["moved"]) / writes


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file-space", type=float, nargs="+", default=[1.5, 2.0, 2.5, 3.0])
    p.add_argument("--rows", type=int, default=100_000)
    p.add_argument("--segment-rows", type=int, default=512)
    p.add_argument("--writes-per-row", type=float, default=20.0, help="20: long enough for the steady state")
    args = p.parse_args()
    for f in args.file_space:
        wa = write_amplification(f, args.rows, args.segment_rows, int(args.writes_per_row * args.rows))
        print(f"file space {f:.2f}x: write amplification {wa:.3f}")


if __name__ == "__main__":
    main()
