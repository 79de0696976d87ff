#!/usr/bin/env python3
"""dlrm-serve as a user runs it: a model trained by dlrm-train on a small
Criteo TSV file (table 2 on the ssd tier), served by dlrm-serve on a free
port, then
  1. examples/python/serve_client.py against it (both forms, a bad request);
  2. a reload under load: a client thread scores while dlrm-train continues
     the run and moves LATEST; no request fails, the version moves;
  3. SIGTERM with three requests in flight (--debug_score_delay_ms holds each
     scoring): all three answered 200, exit status 0;
  4. with --load, bench/serve_http_load for half a second at a low rate: it
     runs and every request is answered 200 (no timing is judged).
When ../shared/tools/memlimit can run (root, a cgroup memory controller),
dlrm-serve runs under it, so the reload is done within --memlimit (its peak
is printed); elsewhere it runs plainly and says so.

    serve_client_test.py --train build/apps/dlrm-train --serve build/apps/dlrm-serve \
        --client examples/python/serve_client.py [--memlimit 1G]
"""
import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time


def criteo_tsv(path, lines, seed):
    rng = random.Random(seed)
    with open(path, "w") as f:
        for _ in range(lines):
            fields = [str(rng.randrange(2))]
            fields += ["" if rng.random() < 0.1 else str(rng.randrange(-3, 3000)) for _ in range(13)]
            fields += ["" if rng.random() < 0.1 else "%x" % ((rng.randrange(600) + 1) * 0x9E3779B1 % 2**32)
                       for _ in range(26)]
            f.write("\t".join(fields) + "\n")


def train(args, work, steps, resume):
    command = [args.train, "--config", os.path.join(work, "model.yaml"), "--set", "train.steps=%d" % steps]
    if resume:
        command.append("--resume")
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def post(port, path, body, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def metric(port, series):
    status, text = get(port, "/metrics")
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return None


class Serve:
    """dlrm-serve in a subprocess; its port from the line it prints."""

    def __init__(self, args, work, extra, memlimit):
        command = [args.serve, "--checkpoint", os.path.join(work, "ck"), "--port", "0",
                   "--ssd_cache_bytes", "64MiB"] + extra
        if memlimit:
            command = [memlimit, args.memlimit] + command
        self.stderr = open(os.path.join(work, "serve.err"), "w+")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            raise SystemExit("dlrm-serve did not start: %r\n%s" % (line, self.log()))
        self.port = int(m.group(1))
        for _ in range(6000):  # live at once, ready once the model is open
            try:
                if get(self.port, "/v2/health/ready")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.01)

    def log(self):
        self.stderr.seek(0)
        return self.stderr.read()

    def server_pid(self):
        """dlrm-serve's pid: the process started, or memlimit's child."""
        pid = self.proc.pid
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if os.path.basename(f.read().split(b"\0")[0]) == b"dlrm-serve":
                return pid
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return int(f.read().split()[0])

    def stop(self):
        os.kill(self.server_pid(), signal.SIGTERM)
        return self.proc.wait(timeout=120)


def one_request(n, table_rows, seed):
    rng = random.Random(seed)
    dense = [[rng.uniform(0, 5) for _ in range(13)] for _ in range(n)]
    sparse = [[rng.randrange(r) for r in table_rows] for _ in range(n)]
    return json.dumps({"inputs": [
        {"name": "dense", "datatype": "FP32", "shape": [n, 13], "data": dense},
        {"name": "sparse", "datatype": "INT64", "shape": [n, 26], "data": sparse}]})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True)
    parser.add_argument("--serve", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--memlimit_tool", default=os.path.join(os.path.dirname(__file__), "..", "..", "..",
                                                                "shared", "tools", "memlimit"))
    parser.add_argument("--memlimit", default="1G")
    parser.add_argument("--load", help="bench/serve_http_load, run briefly against the server")
    args = parser.parse_args()

    memlimit = None
    if os.path.exists(args.memlimit_tool) and os.geteuid() == 0:
        probe = subprocess.run([args.memlimit_tool, "64M", "true"], capture_output=True)
        if probe.returncode == 0:
            memlimit = args.memlimit_tool
    print("dlrm-serve runs %s" % ("under memlimit %s" % args.memlimit if memlimit else
                                  "without memlimit (it needs root and a cgroup memory controller)"))

    work = tempfile.mkdtemp(prefix="cemb_serve_client_test_")
    try:
        criteo_tsv(os.path.join(work, "train.txt"), 1400, 21)
        with open(os.path.join(work, "model.yaml"), "w") as f:
            f.write("data: {source: tsv, path: %s/train.txt, format: kaggle, max_ind_range: 997, work_dir: %s/data}\n"
                    "model:\n  embedding_dim: 8\n  bottom_mlp: [16, 8]\n  top_mlp: [16, 1]\n"
                    "  storage: {kind: dram, slow_tier: %s}\n  table_storage: {\"2\": {kind: ssd}}\n"
                    "  dram_budget: 16MiB\n"
                    "train: {batch_size: 200, steps: 2, threads: 2, progress: false, checkpoint_dir: %s/ck}\n"
                    % (work, work, work, work))
        train(args, work, 2, resume=False)

        # 1. The example client.
        serve = Serve(args, work, ["--reload_poll_s", "0.05"], memlimit)
        out = subprocess.run([sys.executable, args.client, "--url", "http://127.0.0.1:%d" % serve.port,
                              "--samples", "5"], capture_output=True, text=True)
        print(out.stdout, end="")
        if out.returncode != 0 or "serve_client: ok, model version 2, 10 probabilities" not in out.stdout:
            raise SystemExit("serve_client.py failed:\n%s%s\n%s" % (out.stdout, out.stderr, serve.log()))

        # 2. A reload under load.
        _, meta = get(serve.port, "/v2/models/dlrm")
        table_rows = json.loads(meta)["parameters"]["table_rows"]
        body = one_request(4, table_rows, 3)
        stop = threading.Event()
        results = []

        def load():
            for _ in range(20000):  # bounded; stopped once the new version answered
                if stop.is_set():
                    return
                status, answer = post(serve.port, "/v2/models/dlrm/infer", body)
                results.append((status, json.loads(answer).get("model_version") if status == 200 else answer))

        client = threading.Thread(target=load)
        client.start()
        train(args, work, 4, resume=True)
        deadline = time.monotonic() + 120
        while not any(v == "4" for s, v in results if s == 200):
            if time.monotonic() > deadline or not client.is_alive():
                break
            time.sleep(0.01)
        stop.set()
        client.join()
        failed = [r for r in results if r[0] != 200]
        versions = sorted({v for s, v in results if s == 200})
        print("reload under load: %d requests, %d failed, versions %s" % (len(results), len(failed), versions))
        if failed or versions != ["2", "4"]:
            raise SystemExit("reload: failed requests %s, versions %s\n%s" % (failed[:3], versions, serve.log()))
        if serve.stop() != 0:
            raise SystemExit("dlrm-serve did not exit 0 after SIGTERM\n%s" % serve.log())
        print("\n".join(l for l in serve.log().splitlines() if "reload" in l or "memlimit" in l))

        # 4. The load generator runs against it.
        if args.load:
            serve = Serve(args, work, ["--reload_poll_s", "0"], None)
            out = subprocess.run([args.load, "--url", "http://127.0.0.1:%d" % serve.port, "--qps", "200",
                                  "--seconds", "0.5", "--warmup_seconds", "0.1", "--connections", "4",
                                  "--samples", "2"], capture_output=True, text=True)
            print(out.stdout, end="")
            fields = dict(zip(out.stdout.split()[1::2], out.stdout.split()[2::2]))
            if out.returncode != 0 or int(fields.get("ok", 0)) == 0 or \
                    any(int(fields.get(k, 1)) != 0 for k in ("status_503", "other_errors", "failed")):
                raise SystemExit("serve_http_load: %s%s" % (out.stdout, out.stderr))
            if serve.stop() != 0:
                raise SystemExit("dlrm-serve did not exit 0 after SIGTERM\n%s" % serve.log())

        # 3. SIGTERM with requests in flight: one scoring held, two queued.
        serve = Serve(args, work, ["--contexts", "1", "--max_batch", "1", "--max_wait_us", "0",
                                   "--debug_score_delay_ms", "300", "--reload_poll_s", "0"], memlimit)
        answers = []
        threads = [threading.Thread(target=lambda: answers.append(post(serve.port, "/v2/models/dlrm/infer", body)[0]))
                   for _ in range(3)]
        for t in threads:
            t.start()
        while (metric(serve.port, "cemb_serve_batch_samples_count") or 0) + \
                (metric(serve.port, "cemb_serve_queued_requests") or 0) < 3:
            time.sleep(0.005)
        code = serve.stop()
        for t in threads:
            t.join()
        print("SIGTERM with 3 requests in flight: answers %s, exit status %d" % (answers, code))
        if code != 0 or answers != [200, 200, 200]:
            raise SystemExit("shutdown: %s, exit %d\n%s" % (answers, code, serve.log()))
        print("serve_client_test: ok")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
