#!/usr/bin/env python3
"""Loads a weights file the way the upstream Python TAEHV does and checks it decodes the reference.

usage: .venv/bin/python upstream_load.py WEIGHTS.safetensors REFERENCE_DIR SOURCE_DIR

Upstream (madebyollin/taehv) builds the model and calls
`load_state_dict(patch_tgrow_layers(safetensors.torch.load_file(path)))`. Python's `safetensors` package is not
installable here, so `load_file` is replaced by `read_strict` below, written from the format specification with the
checks the reference implementation makes: 8-byte little-endian header length, a JSON object header whose entries
have exactly dtype/shape/data_offsets, optional `__metadata__` (string to string), offsets that tile the byte buffer
in order with no hole or overlap and match dtype x shape. The model is bench/model/taehv_py.py (written from
ARCHITECTURE.md, reproduces the reference to 3e-7), loaded with strict=True: a missing, unexpected or wrongly shaped
tensor fails. Then `noise_latents` of taehv.public.io.safetensors is decoded and compared with `noise_frames`.

Exit 0 and a line `max_abs_error=E` when E <= 2e-5; exit 1 with the reason on stderr otherwise."""
import json
import struct
import sys

import torch

DTYPES = {"F32": (torch.float32, 4), "F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2)}
MAX_HEADER = 100_000_000  # the reference implementation's limit on the JSON header size, bytes
TOLERANCE = 2e-5


class FormatError(Exception):
    pass


def _no_duplicates(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise FormatError(f"duplicate key '{key}' in the header")
        out[key] = value
    return out


def read_strict(path):
    """The contract of safetensors.torch.load_file for F32/F16/BF16 files: name -> CPU tensor, stored dtype."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise FormatError(f"{path}: {len(data)} bytes, shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise FormatError(f"{path}: header length {n} does not fit the file ({len(data)} bytes)")
    raw = data[8:8 + n]
    if not raw.startswith(b"{"):
        raise FormatError(f"{path}: header does not start with '{{'")
    try:
        header = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"{path}: header is not valid UTF-8 JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    buffer = data[8 + n:]
    meta = header.pop("__metadata__", None)
    if meta is not None and not (isinstance(meta, dict) and all(isinstance(k, str) and isinstance(v, str)
                                                                for k, v in meta.items())):
        raise FormatError(f"{path}: __metadata__ must map strings to strings")
    spans = []
    for name, spec in header.items():
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
            raise FormatError(f"{path}: tensor '{name}': entry must have exactly dtype, shape, data_offsets")
        if spec["dtype"] not in DTYPES:
            raise FormatError(f"{path}: tensor '{name}': dtype {spec['dtype']!r} not F32/F16/BF16")
        shape, offsets = spec["shape"], spec["data_offsets"]
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise FormatError(f"{path}: tensor '{name}': bad shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise FormatError(f"{path}: tensor '{name}': bad data_offsets {offsets!r}")
        numel = 1
        for d in shape:
            numel *= d
        if offsets[1] - offsets[0] != numel * DTYPES[spec["dtype"]][1]:
            raise FormatError(f"{path}: tensor '{name}': data_offsets {offsets} do not hold {spec['dtype']} "
                              f"{shape}")
        spans.append((offsets[0], offsets[1], name))
    end = 0
    for begin, stop, name in sorted(spans):
        if begin != end:
            raise FormatError(f"{path}: tensor '{name}' starts at {begin}, expected {end} (hole or overlap)")
        end = stop
    if end != len(buffer):
        raise FormatError(f"{path}: tensors cover {end} bytes of a {len(buffer)}-byte buffer")
    out = {}
    for name, spec in header.items():
        dtype = DTYPES[spec["dtype"]][0]
        b, e = spec["data_offsets"]
        if e > b:
            t = torch.frombuffer(bytearray(buffer[b:e]), dtype=dtype)
        else:
            t = torch.empty(0, dtype=dtype)
        if sys.byteorder != "little":
            t = t.byteswap()  # pragma: no cover (x86/arm64 only here)
        out[name] = t.reshape(spec["shape"])
    return out


def patch_tgrow_layers(model, sd):
    """Upstream's patch: a TGrow weight with more output rows than the model's (time-upscale switched off)
    keeps the rows of the last time step."""
    own = model.state_dict()
    for key, value in sd.items():
        if key in own and key.endswith("conv.weight") and value.ndim == 4 and value.shape[2:] == (1, 1) \
                and value.shape[0] > own[key].shape[0]:
            sd[key] = value[-own[key].shape[0]:]
    return sd


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    weights, ref_dir, source_dir = sys.argv[1:]
    sys.path.insert(0, f"{source_dir}/bench/model")
    from taehv_py import TAEHV  # noqa: E402 (path set just above)

    try:
        sd = read_strict(weights)
    except (OSError, FormatError) as e:
        sys.exit(f"upstream_load: cannot read weights: {e}")
    torch.set_num_threads(1)
    model = TAEHV()
    try:
        model.load_state_dict(patch_tgrow_layers(model, sd), strict=True)
    except RuntimeError as e:
        sys.exit(f"upstream_load: load_state_dict(strict=True) rejected {weights}: {e}")
    io = read_strict(f"{ref_dir}/taehv.public.io.safetensors")
    with torch.no_grad():
        got = model.float().decode_video(io["noise_latents"].float())
    want = io["noise_frames"].float()
    if got.shape != want.shape:
        sys.exit(f"upstream_load: decoded shape {tuple(got.shape)}, reference {tuple(want.shape)}")
    err = (got.double() - want.double()).abs().max().item()
    print(f"tensors={len(sd)} max_abs_error={err:.3e}")
    if not err <= TOLERANCE:
        sys.exit(f"upstream_load: max abs error {err:.3e} > {TOLERANCE}")


if __name__ == "__main__":
    main()
