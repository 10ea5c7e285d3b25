"""The safetensors file layout, read and written by hand with the standard library only
(json + struct), so that scripts without torch (write_hf_fixture.py, in CI) and with it
(gpt2_reference.py) share one reader and writer. Tensors travel as raw little-endian bytes;
turning them into values (struct, numpy, torch) is the caller's business.

Layout: u64 header length, a JSON header {"__metadata__": {...}, name: {"dtype", "shape",
"data_offsets": [begin, end]}} padded with spaces to 8 bytes, then the data.
"""
import json
import struct


def read_raw(path):
    """({name: (dtype, shape, bytes)} in header order, metadata)."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    data = raw[8 + n :]
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], e["shape"], data[b:end])
    return out, meta


def write_raw(path, tensors, meta):
    """Writes [(name, dtype, shape, bytes)] in the given order after "__metadata__", as the
    safetensors library does; returns the size of the data."""
    header, blobs, offset = {"__metadata__": meta}, [], 0
    for name, dtype, shape, b in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    return offset
