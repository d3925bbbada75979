#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into fuzz/corpus/<name>/.

Each seed is a small file that is valid or broken in one named way (the file
name says which), so that the fuzzers start from every branch of the readers
and tests/fuzz_corpus_test.cpp replays them as regression cases. Standard
library only; deterministic (same bytes every run). Files the fuzzers found
live beside the seeds under other names and are left alone.

usage: fuzz/make_seeds.py [corpus dir]   (default: fuzz/corpus next to this file)
"""

import gzip
import json
import os
import random
import struct
import sys

# ---- safetensors ----

ST_DTYPES = {"F32": ("<f", 4), "F64": ("<d", 8), "F16": ("<e", 2), "BF16": (None, 2),
             "I32": ("<i", 4), "I64": ("<q", 8), "U8": ("<B", 1), "BOOL": ("<B", 1)}


def st_file(header, data=b"", pad_to=8, length=None):
    text = header if isinstance(header, (bytes, str)) else json.dumps(header, separators=(",", ":"))
    text = text.encode() if isinstance(text, str) else text
    if pad_to:
        text += b" " * (-len(text) % pad_to)
    n = len(text) if length is None else length
    return struct.pack("<Q", n) + text + data


def st_tensors(tensors, metadata=None, pad_to=8):
    """tensors: [(name, dtype, shape, bytes)] laid out in order."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    return st_file(header, data, pad_to)


def elements(dtype, count):
    fmt, size = ST_DTYPES[dtype]
    if dtype == "BOOL":
        return bytes(i % 2 for i in range(count))
    if fmt is None:  # bf16: the top half of an f32
        return b"".join(struct.pack("<f", float(i))[2:] for i in range(count))
    if fmt in ("<f", "<d", "<e"):
        return b"".join(struct.pack(fmt, i * 0.5 - 1) for i in range(count))
    return b"".join(struct.pack(fmt, i % 200) for i in range(count))


def safetensors_seeds():
    s = {}
    s["valid_empty"] = st_file({})
    for dtype in ST_DTYPES:
        s[f"valid_{dtype.lower()}_2x3"] = st_tensors([("w", dtype, [2, 3], elements(dtype, 6))])
    s["valid_scalar"] = st_tensors([("s", "F32", [], elements("F32", 1))])
    s["valid_zero_size"] = st_tensors([("z", "F32", [0, 4], b""), ("a", "I64", [2], elements("I64", 2))])
    s["valid_many"] = st_tensors([("a", "F64", [2, 2], elements("F64", 4)), ("b", "F32", [3], elements("F32", 3)),
                                  ("c", "F16", [1, 1, 2], elements("F16", 2)), ("d", "U8", [5], elements("U8", 5))])
    s["valid_metadata"] = st_tensors([("w", "F32", [2], elements("F32", 2))], {"format": "pt", "epoch": "3"})
    s["valid_unaligned"] = st_tensors([("u", "U8", [3], b"\1\2\3"), ("f", "F32", [2], elements("F32", 2))], pad_to=1)
    s["valid_rank8"] = st_tensors([("r", "U8", [1, 2, 1, 2, 1, 2, 1, 1], elements("U8", 8))])
    good = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    data = elements("F32", 2)
    s["short_file"] = b"\x08\0\0\0"
    s["header_length_huge"] = st_file({"w": good}, data, length=2**63)
    s["header_length_past_end"] = st_file({"w": good}, data, length=4096)
    s["header_not_object"] = st_file("[1, 2]", b"")
    s["header_not_json"] = st_file('{"w": {"dtype": "F32",', data)
    s["header_nul"] = st_file(b'{"w":\0 1}', b"")
    s["header_duplicate_key"] = st_file('{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
                                        '"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', data)
    s["header_deep"] = st_file('{"w": {"dtype": {"a": {"b": 1}}}}', b"")
    s["header_long_array"] = st_file({"w": {"dtype": "U8", "shape": [1] * 9, "data_offsets": [0, 1]}}, b"\1")
    s["entry_not_object"] = st_file({"w": 3}, b"")
    s["entry_missing_dtype"] = st_file({"w": {"shape": [2], "data_offsets": [0, 8]}}, data)
    s["entry_extra_field"] = st_file({"w": dict(good, extra=1)}, data)
    s["dtype_unknown"] = st_file({"w": dict(good, dtype="F8_E4M3")}, data)
    s["dtype_not_string"] = st_file({"w": dict(good, dtype=4)}, data)
    s["shape_negative"] = st_file({"w": dict(good, shape=[-2])}, data)
    s["shape_float"] = st_file({"w": dict(good, shape=[2.0])}, data)
    s["shape_overflow"] = st_file({"w": dict(good, shape=[2**62, 2**62])}, data)
    s["shape_bytes_overflow"] = st_file({"w": dict(good, shape=[2**61])}, data)
    s["offsets_outside"] = st_file({"w": dict(good, data_offsets=[0, 16])}, data)
    s["offsets_reversed"] = st_file({"w": dict(good, data_offsets=[8, 0])}, data)
    s["offsets_wrong_size"] = st_file({"w": dict(good, shape=[3])}, data)
    s["offsets_one_number"] = st_file({"w": dict(good, data_offsets=[0])}, data)
    s["offsets_negative"] = st_file({"w": dict(good, data_offsets=[-8, 0])}, data)
    s["overlap"] = st_file({"a": good, "b": good}, data)
    s["hole"] = st_file({"w": dict(good, data_offsets=[4, 12])}, data + data[:4])
    s["trailing_data"] = st_file({"w": good}, data + b"\0" * 8)
    s["bool_not_0_or_1"] = st_file({"b": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\1\2")
    s["metadata_not_string"] = st_tensors([("w", "F32", [2], data)], {"epoch": 3})
    s["metadata_not_object"] = st_file({"__metadata__": "x"}, b"")
    return s


# ---- npy ----

NPY_DESCRS = {"<f4": "<f", "<f8": "<d", "<f2": "<e", "<i4": "<i", "<i8": "<q", "|u1": "<B", "|b1": "<B",
              ">f4": ">f", ">f8": ">d", ">f2": ">e", ">i4": ">i", ">i8": ">q", "=f4": "<f", ">u1": "<B"}


def npy_file(header, data=b"", version=(1, 0), length=None, magic=b"\x93NUMPY"):
    text = header.encode() if isinstance(header, str) else header
    size_bytes = 2 if version[0] == 1 else 4
    text += b" " * (-(len(magic) + 2 + size_bytes + len(text) + 1) % 64) + b"\n"
    n = len(text) if length is None else length
    size = struct.pack("<H" if size_bytes == 2 else "<I", n % (1 << (8 * size_bytes)))
    return magic + bytes(version) + size + text + data


def npy_array(descr, shape, fortran=False, version=(1, 0)):
    count = 1
    for d in shape:
        count *= d
    fmt = NPY_DESCRS[descr]
    if descr.endswith("b1"):
        data = bytes(i % 2 for i in range(count))
    else:
        data = b"".join(struct.pack(fmt, i % 100) for i in range(count))
    tup = "(" + "".join(f"{d}, " for d in shape).rstrip(" ") + ")" if len(shape) != 1 else f"({shape[0]},)"
    header = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {tup}, }}"
    return npy_file(header, data, version)


def npy_seeds():
    s = {}
    for descr in NPY_DESCRS:
        name = descr.replace("<", "le_").replace(">", "be_").replace("|", "na_").replace("=", "native_")
        s[f"valid_{name}_2x3"] = npy_array(descr, [2, 3])
    s["valid_scalar"] = npy_array("<f4", [])
    s["valid_1d"] = npy_array("<i8", [5])
    s["valid_zero_size"] = npy_array("<f4", [0, 3])
    s["valid_fortran_2x3"] = npy_array("<f4", [2, 3], fortran=True)
    s["valid_fortran_be_3d"] = npy_array(">i4", [2, 3, 2], fortran=True)
    s["valid_v2"] = npy_array("<f8", [3], version=(2, 0))
    s["valid_v3"] = npy_array("|u1", [4], version=(3, 0))
    s["valid_rank8"] = npy_array("|u1", [1, 2, 1, 2, 1, 2, 1, 1])
    s["valid_python2_long"] = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 1L), }", b"\0" * 8)
    s["valid_double_quotes"] = npy_file('{"descr": "<f4", "fortran_order": False, "shape": (1,)}', b"\0" * 4)
    hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"
    data = b"\0" * 8
    s["bad_magic"] = npy_file(hdr, data, magic=b"\x93NUMPX")
    s["short_file"] = b"\x93NUMPY\x01"
    s["version_4"] = npy_file(hdr, data, version=(4, 0))
    s["version_1_1"] = npy_file(hdr, data, version=(1, 1))
    s["header_length_past_end"] = npy_file(hdr, data, length=4000)
    s["header_length_huge"] = npy_file(hdr, data, version=(2, 0), length=2**31)
    s["missing_key"] = npy_file("{'descr': '<f4', 'shape': (2,), }", data)
    s["repeated_key"] = npy_file("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", data)
    s["unexpected_key"] = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data)
    s["shape_not_tuple"] = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", data)
    s["shape_rank9"] = npy_file("{'descr': '|u1', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", b"\0")
    s["shape_overflow"] = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }")
    s["shape_bytes_overflow"] = npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,), }")
    s["shape_negative"] = npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data)
    s["descr_unknown"] = npy_file("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", data)
    s["descr_structured"] = npy_file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", data)
    s["fortran_not_bool"] = npy_file("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", data)
    s["unterminated_string"] = npy_file("{'descr': '<f4", data)
    s["escaped_string"] = npy_file("{'descr': '<f\\4', 'fortran_order': False, 'shape': (2,), }", data)
    s["text_after_dict"] = npy_file(hdr + " x", data)
    s["data_short"] = npy_file(hdr, data[:7])
    s["data_long"] = npy_file(hdr, data + b"\0")
    s["bool_not_0_or_1"] = npy_file("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", b"\1\7")
    return s


# ---- IDX ----

IDX_TYPES = {0x08: ">B", 0x09: ">b", 0x0B: ">h", 0x0C: ">i", 0x0D: ">f", 0x0E: ">d"}


def idx_file(type_code, dims, data=None):
    head = bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims)
    if data is None:
        count = 1
        for d in dims:
            count *= d
        fmt = IDX_TYPES[type_code]
        data = b"".join(struct.pack(fmt, (i % 100) - (50 if fmt in (">b", ">h") else 0)) for i in range(count))
    return head + data


def gz(raw):
    return gzip.compress(raw, mtime=0)


def idx_seeds():
    s = {}
    for code, fmt in IDX_TYPES.items():
        s[f"valid_type{code:02x}_2x3"] = idx_file(code, [2, 3])
        s[f"valid_gzip_type{code:02x}_3x2"] = gz(idx_file(code, [3, 2]))
    s["valid_images_2x4x4"] = idx_file(0x08, [2, 4, 4])
    s["valid_zero_size"] = idx_file(0x08, [0, 28, 28])
    s["valid_rank8"] = idx_file(0x08, [1, 2, 1, 2, 1, 2, 1, 1])
    s["valid_gzip_two_members"] = gz(idx_file(0x08, [4])[:6]) + gz(idx_file(0x08, [4])[6:])
    good = idx_file(0x08, [2, 3])
    s["empty"] = b""
    s["short_header"] = good[:3]
    s["bad_magic"] = b"\1" + good[1:]
    s["unknown_type"] = bytes([0, 0, 0x0A]) + good[3:]
    s["zero_dims"] = bytes([0, 0, 8, 0])
    s["nine_dims"] = bytes([0, 0, 8, 9]) + struct.pack(">I", 1) * 9 + b"\0"
    s["truncated_dims"] = good[:9]
    s["truncated_data"] = good[:-1]
    s["trailing_bytes"] = good + b"\0"
    s["dims_overflow"] = idx_file(0x0E, [0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF], b"")
    s["dims_huge"] = idx_file(0x08, [60000, 28, 28], b"\0" * 16)
    raw = gz(good)
    s["gzip_truncated"] = raw[:-6]
    s["gzip_bad_crc"] = raw[:-8] + bytes(b ^ 0xFF for b in raw[-8:-4]) + raw[-4:]
    s["gzip_trailing_garbage"] = raw + b"garbage"
    s["gzip_trailing_data"] = gz(good + b"\0\0")
    s["gzip_bomb_claim"] = gz(idx_file(0x08, [1 << 20, 1 << 10], b""))
    s["gzip_magic_only"] = b"\x1f\x8b"
    s["gzip_corrupt_deflate"] = raw[:10] + b"\xff" * (len(raw) - 18) + raw[-8:]
    return s


# ---- views ----

def views_seeds():
    rng = random.Random(6)
    s = {}
    for dtype in range(8):
        # dtype, a 24-element base, then op bytes: reshape to (2, 3, 4), permute,
        # narrow, expand, read.
        s[f"reshape_permute_dtype{dtype}"] = bytes([dtype, 0, 24, 9, 1, 3, 2, 3, 4, 3, 2, 0, 200, 0, 1, 1, 0, 2,
                                                    5, 1, 0, 0, 0])
    s["as_strided_overlapping"] = bytes([0, 0, 40, 12, 2, 12, 3, 4, 1 + 6, 1 + 6, 2])
    s["as_strided_negative_strides"] = bytes([1, 0, 40, 12, 2, 12, 3, 3, 6 - 3, 6 - 1, 30])
    s["as_strided_out_of_bounds"] = bytes([2, 0, 10, 12, 1, 12, 4, 6 + 4, 8])
    s["as_strided_wild_stride"] = bytes([3, 0, 10, 12, 2, 12, 0, 3, 240, 6 + 1, 0, 11])
    s["empty_base"] = bytes([4, 0, 0, 8, 0, 1, 0, 0])
    s["scalar_ops"] = bytes([5, 0, 1, 9, 1, 0, 7, 0, 6, 0, 4, 0, 0, 11, 10, 0, 0])
    for i in range(24):
        s[f"random_{i:02d}"] = bytes(rng.randrange(256) for _ in range(rng.randrange(4, 96)))
    return s


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
    for name, seeds in [("safetensors", safetensors_seeds()), ("npy", npy_seeds()), ("idx", idx_seeds()),
                        ("views", views_seeds())]:
        directory = os.path.join(root, name)
        os.makedirs(directory, exist_ok=True)
        for seed, data in seeds.items():
            with open(os.path.join(directory, "seed_" + seed), "wb") as f:
                f.write(data)
        print(f"{name}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
