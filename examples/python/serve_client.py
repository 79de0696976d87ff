#!/usr/bin/env python3
"""Scores samples on a running dlrm-serve over HTTP, with nothing but Python's
standard library (http.client, json): the Open Inference Protocol's REST
requests (docs/serving.md, "dlrm-serve").

    build/apps/dlrm-serve --checkpoint runs/ck &
    /usr/bin/python3 examples/python/serve_client.py --url http://127.0.0.1:8000 --samples 4

It waits until the server is ready, reads the model's metadata (its inputs and
each table's rows), sends --samples random samples in the preprocessed form
("dense" FP32 [n, 13], "sparse" INT64 [n, tables]) and, when the model takes
them, the same number as raw Criteo features ("int_features" INT64 [n, 13],
"cat_features" BYTES [n, 26], hex ids as in the TSV), then one bad request to
show the error answer. Prints each answer's probabilities; the last line is
"serve_client: ok, model version V, N probabilities" (a script can parse it).
Exit status 1 when the server does not answer as the protocol says.
"""
import argparse
import http.client
import json
import random
import sys
import time
import urllib.parse


class Client:
    """One keep-alive connection to dlrm-serve."""

    def __init__(self, url, timeout=30.0):
        u = urllib.parse.urlsplit(url)
        self.conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)

    def request(self, method, path, body=None):
        """Returns (status, parsed JSON or None)."""
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        try:
            self.conn.request(method, path, body=data, headers=headers)
            response = self.conn.getresponse()
            raw = response.read()
        except (ConnectionError, http.client.HTTPException):
            self.conn.close()  # the server closed it (Connection: close): once more on a new one
            self.conn.request(method, path, body=data, headers=headers)
            response = self.conn.getresponse()
            raw = response.read()
        if response.getheader("Connection", "").lower() == "close":
            self.conn.close()
        return response.status, (json.loads(raw) if raw else None)

    def wait_ready(self, seconds):
        deadline = time.monotonic() + seconds
        while True:
            try:
                status, _ = self.request("GET", "/v2/health/ready")
                if status == 200:
                    return
            except OSError:
                self.conn.close()
            if time.monotonic() > deadline:
                raise SystemExit("serve_client: the server was not ready in %g s" % seconds)
            time.sleep(0.1)

    def infer(self, model, inputs, request_id=None):
        body = {"inputs": inputs, "outputs": [{"name": "probabilities"}]}
        if request_id is not None:
            body["id"] = request_id
        return self.request("POST", "/v2/models/%s/infer" % model, body)


def tensor(name, datatype, rows):
    """An input tensor of a [n, columns] list of rows (nested "data")."""
    return {"name": name, "datatype": datatype, "shape": [len(rows), len(rows[0])], "data": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--model", default="dlrm")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the server to be ready")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    client = Client(args.url)
    client.wait_ready(args.wait)

    status, meta = client.request("GET", "/v2/models/%s" % args.model)
    if status != 200:
        raise SystemExit("serve_client: metadata: HTTP %d %s" % (status, meta))
    inputs = {t["name"]: t for t in meta["inputs"]}
    table_rows = meta["parameters"]["table_rows"]
    num_dense = inputs["dense"]["shape"][1]
    print("model %s version %s: inputs %s" % (meta["name"], meta["versions"][0],
                                             ", ".join("%s %s %s" % (t["name"], t["datatype"], t["shape"])
                                                       for t in meta["inputs"])))

    # The preprocessed form: dense features as trained, one row per table.
    n = args.samples
    dense = [[rng.uniform(0.0, 5.0) for _ in range(num_dense)] for _ in range(n)]
    sparse = [[rng.randrange(rows) for rows in table_rows] for _ in range(n)]
    status, answer = client.infer(args.model, [tensor("dense", "FP32", dense), tensor("sparse", "INT64", sparse)],
                                  request_id="preprocessed-1")
    if status != 200:
        raise SystemExit("serve_client: infer: HTTP %d %s" % (status, answer))
    output = answer["outputs"][0]
    if output["name"] != "probabilities" or output["shape"] != [n] or answer["id"] != "preprocessed-1":
        raise SystemExit("serve_client: unexpected answer %s" % answer)
    probabilities = output["data"]
    print("preprocessed: %s" % " ".join("%.6f" % p for p in probabilities))

    # Raw Criteo features, where the model was trained on Criteo TSV.
    if "cat_features" in inputs:
        ints = [[rng.randrange(-3, 3000) if rng.random() > 0.1 else None for _ in range(13)] for _ in range(n)]
        cats = [["%08x" % rng.getrandbits(32) if rng.random() > 0.1 else "" for _ in range(26)] for _ in range(n)]
        status, answer = client.infer(args.model, [tensor("int_features", "INT64", ints),
                                                   tensor("cat_features", "BYTES", cats)])
        if status != 200:
            raise SystemExit("serve_client: infer (raw Criteo): HTTP %d %s" % (status, answer))
        print("raw Criteo:   %s" % " ".join("%.6f" % p for p in answer["outputs"][0]["data"]))
        probabilities += answer["outputs"][0]["data"]

    # A bad request: a row beyond table 0. The answer names input, sample and table.
    sparse[n - 1][0] = table_rows[0]
    status, answer = client.infer(args.model, [tensor("dense", "FP32", dense), tensor("sparse", "INT64", sparse)])
    if status != 400 or "error" not in answer:
        raise SystemExit("serve_client: a row out of range got HTTP %d %s" % (status, answer))
    print("bad request:  HTTP %d %s" % (status, answer["error"]))

    if not all(0.0 <= p <= 1.0 for p in probabilities):
        raise SystemExit("serve_client: probabilities outside [0, 1]: %s" % probabilities)
    print("serve_client: ok, model version %s, %d probabilities" % (meta["versions"][0], len(probabilities)))


if __name__ == "__main__":
    sys.exit(main())
