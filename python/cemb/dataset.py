"""The engine's binary dataset (docs/data.md; written by dlrm-data and
dlrm-train's data preparation) read from Python with NumPy, memory-mapped."""
import os

import numpy as np

__all__ = ["read_header", "open_binary"]


def read_header(path):
    """The header as a dict (header_bytes, samples, dense, tables, hotness, sizes); SystemExit naming
    the file when it is not a version-1 dataset or its size is not what the header promises."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:8] != b"CEMBDSET":
            raise SystemExit(f"{path}: not a CachedEmbeddings dataset (no CEMBDSET magic)")
        version, header_bytes = np.frombuffer(head[8:16], "<u4")
        samples = int(np.frombuffer(head[16:24], "<u8")[0])
        dense, tables, hotness, record_bytes = (int(v) for v in np.frombuffer(head[24:40], "<u4"))
        if version != 1:
            raise SystemExit(f"{path}: dataset version {version}; this reader reads version 1")
        sizes = np.frombuffer(f.read(8 * tables), "<u8").astype(np.int64).tolist()
    if record_bytes != 4 * (1 + dense + tables * hotness):
        raise SystemExit(f"{path}: record bytes {record_bytes} do not match D={dense} T={tables} K={hotness}")
    want = int(header_bytes) + samples * record_bytes
    if os.path.getsize(path) != want:
        raise SystemExit(f"{path}: file is {os.path.getsize(path)} bytes but its header promises {want}")
    return dict(header_bytes=int(header_bytes), samples=samples, dense=dense, tables=tables, hotness=hotness,
                sizes=sizes)


def open_binary(path):
    """(labels [N], dense [N, D], index [N, T, K], table sizes), memory-mapped read-only."""
    h = read_header(path)
    record = np.dtype([("label", "<f4"), ("dense", "<f4", (h["dense"],)),
                       ("index", "<i4", (h["tables"], h["hotness"]))])
    data = np.memmap(path, dtype=record, mode="r", offset=h["header_bytes"], shape=(h["samples"],))
    return data["label"], data["dense"], data["index"], h["sizes"]
