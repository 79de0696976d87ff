"""The engine's binary dataset (docs/data.md; written by dlrm-data and
dlrm-train's data preparation) read from Python with NumPy, memory-mapped.

Versions 1 and 2 are read. Table t has a hotness K_t (indices per sample;
version 1: one K for every table); a record is label, dense[D], then table
0's K_0 indices, table 1's K_1, ..."""
import os

import numpy as np

__all__ = ["read_header", "open_binary", "open_bags"]


def read_header(path):
    """The header as a dict (version, header_bytes, samples, dense, tables, hotness: a list, one per table,
    sizes); SystemExit naming the file and the field when it is not a dataset of version 1 or 2, its
    fields disagree, or its size is not what the header promises."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:8] != b"CEMBDSET":
            raise SystemExit(f"{path}: not a CachedEmbeddings dataset (no CEMBDSET magic)")
        version, header_bytes = (int(v) for v in np.frombuffer(head[8:16], "<u4"))
        samples = int(np.frombuffer(head[16:24], "<u8")[0])
        dense, tables, field32, record_bytes = (int(v) for v in np.frombuffer(head[24:40], "<u4"))
        if version not in (1, 2):
            raise SystemExit(f"{path}: dataset version {version}; this reader reads versions 1 and 2")
        per_table = 8 if version == 1 else 12
        if tables == 0 or header_bytes != (64 + per_table * tables + 63) // 64 * 64:
            raise SystemExit(f"{path}: corrupt header: {tables} tables (byte 28) with a header of "
                             f"{header_bytes} bytes (byte 12)")
        rest = f.read(per_table * tables)
        if len(rest) != per_table * tables:
            raise SystemExit(f"{path}: file shorter than its {header_bytes}-byte header (truncated?)")
    sizes = np.frombuffer(rest[:8 * tables], "<u8").astype(np.int64).tolist()
    if version == 1:
        hotness = [field32] * tables
    else:
        hotness = np.frombuffer(rest[8 * tables:], "<u4").astype(np.int64).tolist()
        for t, k in enumerate(hotness):
            if not 1 <= k <= 100000:
                raise SystemExit(f"{path}: corrupt header: table {t} has hotness {k} (byte {64 + 8 * tables + 4 * t})")
        if sum(hotness) != field32:
            raise SystemExit(f"{path}: corrupt header: the hotness list sums to {sum(hotness)} indices per sample, "
                             f"but byte 32 says {field32}")
    if record_bytes != 4 * (1 + dense + sum(hotness)):
        raise SystemExit(f"{path}: record bytes {record_bytes} (byte 36) do not match D={dense} and "
                         f"hotness {hotness}")
    want = header_bytes + samples * record_bytes
    if os.path.getsize(path) != want:
        raise SystemExit(f"{path}: file is {os.path.getsize(path)} bytes but its header promises {want}")
    return dict(version=version, header_bytes=header_bytes, samples=samples, dense=dense, tables=tables,
                hotness=hotness, sizes=sizes)


def _records(path, h):
    record = np.dtype([("label", "<f4"), ("dense", "<f4", (h["dense"],)), ("index", "<i4", (sum(h["hotness"]),))])
    return np.memmap(path, dtype=record, mode="r", offset=h["header_bytes"], shape=(h["samples"],))


def open_bags(path):
    """(labels [N], dense [N, D], bags: a list of T arrays, table t's [N, K_t], table sizes),
    memory-mapped read-only; any hotness."""
    h = read_header(path)
    data = _records(path, h)
    index, bags, first = data["index"], [], 0
    for k in h["hotness"]:
        bags.append(index[:, first:first + k])
        first += k
    return data["label"], data["dense"], bags, h["sizes"]


def open_binary(path):
    """(labels [N], dense [N, D], index [N, T, K], table sizes), memory-mapped read-only, for a
    dataset whose tables share one hotness K (every version-1 file); SystemExit otherwise (open_bags
    reads any)."""
    h = read_header(path)
    if len(set(h["hotness"])) != 1:
        raise SystemExit(f"{path}: the tables' hotness differs ({h['hotness']}); read it with open_bags")
    record = np.dtype([("label", "<f4"), ("dense", "<f4", (h["dense"],)),
                       ("index", "<i4", (h["tables"], h["hotness"][0]))])
    data = np.memmap(path, dtype=record, mode="r", offset=h["header_bytes"], shape=(h["samples"],))
    return data["label"], data["dense"], data["index"], h["sizes"]
