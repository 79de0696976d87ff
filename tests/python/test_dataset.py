"""cemb.dataset reads the binary format's versions 1 and 2 (docs/data.md). The files are made here
byte by byte as each version lays them out (the reader does not check the checksums)."""
import struct

import numpy as np
import pytest

from cemb.dataset import open_bags, open_binary, read_header

SIZES = [10, 1000, 2]


def indices(i, hotness):
    """Sample i's indices, table by table: index[t][k] = (i + k) % size[t]."""
    return [(i + k) % SIZES[t] for t in range(len(SIZES)) for k in range(hotness[t])]


def write(path, n, hotness, version=2):
    tables, dense = len(SIZES), 3
    per_table = 8 if version == 1 else 12
    header_bytes = (64 + per_table * tables + 63) // 64 * 64
    field32 = hotness[0] if version == 1 else sum(hotness)
    record_bytes = 4 * (1 + dense + sum(hotness))
    head = bytearray(header_bytes)
    head[:8] = b"CEMBDSET"
    struct.pack_into("<IIQIIII", head, 8, version, header_bytes, n, dense, tables, field32, record_bytes)
    struct.pack_into("<I", head, 56, 1)
    struct.pack_into(f"<{tables}Q", head, 64, *SIZES)
    if version == 2:
        struct.pack_into(f"<{tables}I", head, 64 + 8 * tables, *hotness)
    body = bytearray()
    for i in range(n):
        body += struct.pack("<4f", i % 2, i, i + 0.5, -i)
        body += struct.pack(f"<{sum(hotness)}i", *indices(i, hotness))
    path.write_bytes(bytes(head) + bytes(body))
    return path


def test_version2_bags_have_each_tables_hotness(tmp_path):
    hotness = [2, 1, 5]
    path = write(tmp_path / "v2.bin", 20, hotness)
    h = read_header(path)
    assert h["version"] == 2 and h["hotness"] == hotness and h["sizes"] == SIZES and h["samples"] == 20
    labels, dense, bags, sizes = open_bags(path)
    assert sizes == SIZES and len(bags) == 3
    assert [b.shape for b in bags] == [(20, 2), (20, 1), (20, 5)]
    for i in range(20):
        assert labels[i] == i % 2 and list(dense[i]) == [i, i + 0.5, -i]
        for t in range(3):
            assert list(bags[t][i]) == [(i + k) % SIZES[t] for k in range(hotness[t])]
    with pytest.raises(SystemExit, match="hotness differs"):
        open_binary(path)


def test_version1_and_uniform_version2_read_alike(tmp_path):
    v1 = write(tmp_path / "v1.bin", 7, [3, 3, 3], version=1)
    v2 = write(tmp_path / "v2.bin", 7, [3, 3, 3])
    assert read_header(v1)["version"] == 1 and read_header(v1)["hotness"] == [3, 3, 3]
    for path in (v1, v2):
        labels, dense, index, sizes = open_binary(path)
        assert index.shape == (7, 3, 3) and sizes == SIZES
        _, _, bags, _ = open_bags(path)
        for t in range(3):
            assert np.array_equal(index[:, t, :], bags[t])
    assert np.array_equal(open_binary(v1)[2], open_binary(v2)[2])


def test_corrupt_headers_are_named(tmp_path):
    path = write(tmp_path / "bad.bin", 2, [2, 1, 5])
    good = path.read_bytes()

    def changed(at, value):
        b = bytearray(good)
        struct.pack_into("<I", b, at, value)
        path.write_bytes(bytes(b))
        return path

    with pytest.raises(SystemExit, match=r"table 1 has hotness 0 \(byte 92\)"):
        read_header(changed(92, 0))
    with pytest.raises(SystemExit, match="sums to 7 indices per sample, but byte 32 says 8"):
        read_header(changed(96, 4))
    with pytest.raises(SystemExit, match="version 3"):
        read_header(changed(8, 3))
    path.write_bytes(good[:-4])
    with pytest.raises(SystemExit, match="header promises"):
        read_header(path)
