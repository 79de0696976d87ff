#!/usr/bin/env python3
"""Draws a dlrm-train run from its JSON-lines log (train.log_jsonl) into PNGs.

    python3 scripts/plot_run.py run.jsonl [--out DIR]

Writes, into DIR (default: beside the log, <log>.plots/):
  curves.png   train loss per step (the step records of train.log_every, or the
               eval records' mean train loss), validation log loss and AUC, and
               samples/s at each evaluation
  phases.png   the per-phase seconds per step of the summary record
  tables.png   the hit rate of every cached table (and of every ssd table's
               prefetches), when the run had any

A tool, not a build or test dependency: it needs Debian's python3-matplotlib
(`apt-get install python3-matplotlib`), nothing else. Records of several runs
appended to one log (--resume) are drawn as one run; the last summary counts.
"""
import argparse
import json
import os
import sys


def read_records(path):
    steps, evals, summary = [], [], None
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not a JSON record: {e}")
            kind = record.get("type")
            if kind == "step":
                steps.append(record)
            elif kind == "eval":
                evals.append(record)
            elif kind == "summary":
                summary = record
    return steps, evals, summary


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="the JSON-lines log of dlrm-train (train.log_jsonl)")
    parser.add_argument("--out", help="directory for the PNGs (default: <log>.plots)")
    args = parser.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot_run.py needs matplotlib: apt-get install python3-matplotlib")
    if not os.path.isfile(args.log):
        sys.exit(f"{args.log}: no such file")
    steps, evals, summary = read_records(args.log)
    if not steps and not evals and summary is None:
        sys.exit(f"{args.log}: no step, eval or summary records")
    out = args.out or args.log + ".plots"
    os.makedirs(out, exist_ok=True)
    title = os.path.basename(summary["config"]) if summary and summary.get("config") else os.path.basename(args.log)
    written = []

    # Loss, AUC and speed.
    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    loss, auc, speed = axes
    if steps:
        loss.plot([r["step"] for r in steps], [r["loss"] for r in steps], lw=0.8, label="train loss (per step)")
    elif evals:
        loss.plot([r["step"] for r in evals], [r["train_loss"] for r in evals], "o-", label="train loss (mean since the last evaluation)")
    valid = [r for r in evals if r.get("val_log_loss") is not None]
    if valid:
        loss.plot([r["step"] for r in valid], [r["val_log_loss"] for r in valid], "s-", label="validation log loss")
        auc.plot([r["step"] for r in valid], [r["val_auc"] for r in valid], "s-", color="C2", label="validation AUC")
    loss.set_ylabel("log loss")
    loss.legend()
    loss.set_title(title)
    auc.set_ylabel("ROC AUC")
    if valid:
        auc.legend()
    if evals:
        speed.plot([r["step"] for r in evals], [r["samples_per_s"] for r in evals], "o-", color="C3")
    elif summary:
        speed.axhline(summary["samples_per_s"], color="C3")
    speed.set_ylabel("samples/s")
    speed.set_xlabel("step")
    fig.tight_layout()
    written.append(os.path.join(out, "curves.png"))
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    if summary:
        # Where a step's time goes.
        steps_run = max(1, summary["steps"] - summary.get("first_step", 0))
        phases = {k: 1e3 * v / steps_run for k, v in summary["phases"].items() if v}
        if phases:
            names = sorted(phases, key=phases.get)
            fig, ax = plt.subplots(figsize=(8, 0.4 * len(names) + 1.5))
            ax.barh(names, [phases[n] for n in names], color="C0")
            ax.set_xlabel("ms per step")
            ax.set_title(f"{title}: phases ({steps_run} steps)")
            fig.tight_layout()
            written.append(os.path.join(out, "phases.png"))
            fig.savefig(written[-1], dpi=110)
            plt.close(fig)
        # Hit rates of the tables on a slower tier.
        rates = []
        for t in summary.get("tables", []):
            name = t.get("name") or str(t["table"])
            if t.get("cached") and t.get("hit_rate") is not None:
                rates.append((f"{name} ({t['storage']})", t["hit_rate"]))
            if "ssd" in t and t["ssd"].get("hit_rate") is not None:
                rates.append((f"{name} (ssd)", t["ssd"]["hit_rate"]))
        if rates:
            fig, ax = plt.subplots(figsize=(8, 0.4 * len(rates) + 1.5))
            ax.barh([n for n, _ in rates], [100 * r for _, r in rates], color="C1")
            ax.set_xlim(0, 100)
            ax.set_xlabel("hit rate (%)")
            ax.set_title(f"{title}: tables on the slow tier")
            fig.tight_layout()
            written.append(os.path.join(out, "tables.png"))
            fig.savefig(written[-1], dpi=110)
            plt.close(fig)
    for path in written:
        print(path)


if __name__ == "__main__":
    main()
