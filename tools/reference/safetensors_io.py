"""Minimal safetensors writer and reader for the conformance reference.

File layout: an 8-byte little-endian unsigned header length N, then N bytes
of UTF-8 JSON, then the raw little-endian tensor bytes.  The JSON maps each
tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets are
relative to the first byte after the header) and may hold a "__metadata__"
object of string keys and string values.

The writer is deterministic: JSON keys are sorted, tensors are laid out in
order of decreasing element size and then name (so every tensor starts at a
multiple of its element size), and the header is padded with spaces to a
multiple of 8 bytes, so that every regeneration produces identical bytes.
"""

import json
import struct

import numpy as np

# dtype name -> (numpy dtype, bytes per element)
DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "U8": np.dtype("u1"),
    "BF16": np.dtype("<u2"),  # raw bfloat16 bit patterns
}


def _name_of(array):
    for name, dt in DTYPES.items():
        if array.dtype == dt and name != "BF16":
            return name
    raise ValueError("unsupported array dtype %s" % array.dtype)


def write(path, tensors, metadata):
    """Write tensors (a list of (name, numpy array) or (name, array, dtype
    name) tuples) and metadata (dict str -> str) to path."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("metadata must map str to str: %r=%r" % (k, v))
        header["__metadata__"] = dict(metadata)
    entries = []
    for entry in tensors:
        if len(entry) == 3:
            name, array, dtype = entry
        else:
            name, array = entry
            dtype = _name_of(array)
        entries.append((name, array, dtype))
    entries.sort(key=lambda e: (-DTYPES[e[2]].itemsize, e[0]))
    blobs = []
    offset = 0
    for name, array, dtype in entries:
        array = np.ascontiguousarray(array, dtype=DTYPES[dtype])
        raw = array.tobytes(order="C")
        if name in header:
            raise ValueError("duplicate tensor name %s" % name)
        header[name] = {
            "dtype": dtype,
            "shape": [int(d) for d in array.shape],
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def read(path):
    """Return (tensors, metadata): tensors maps name -> (dtype name, array)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    body = data[8 + n :]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        dt = DTYPES[info["dtype"]]
        array = np.frombuffer(body[begin:end], dtype=dt).reshape(info["shape"])
        tensors[name] = (info["dtype"], array.copy())
    return tensors, metadata
