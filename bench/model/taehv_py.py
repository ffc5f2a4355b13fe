"""TAEHV in plain PyTorch, written from ../shared/taehv-reference/ARCHITECTURE.md (no upstream code copied or
downloaded). Used by bench/model/compare.py as the Python baseline for `taehv-train bench`; it is checked against
the reference vectors with `python3 taehv_py.py --check-reference DIR` so both sides compute the same model."""
import json
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv(n_in, n_out, stride=1, bias=True):
    return nn.Conv2d(n_in, n_out, 3, stride=stride, padding=1, bias=bias)


class Clamp(nn.Module):
    def forward(self, x):
        return torch.tanh(x / 3) * 3


class MemBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Sequential(conv(2 * c, c), nn.ReLU(inplace=True), conv(c, c), nn.ReLU(inplace=True), conv(c, c))

    def forward(self, x, past):
        return F.relu(self.conv(torch.cat([x, past], 1)) + x)


class TPool(nn.Module):
    def __init__(self, c, stride):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(c * stride, c, 1, bias=False)

    def forward(self, x):
        nt, c, h, w = x.shape
        return self.conv(x.reshape(nt // self.stride, self.stride * c, h, w))


class TGrow(nn.Module):
    def __init__(self, c, stride):
        super().__init__()
        self.stride = stride
        self.conv = nn.Conv2d(c, c * stride, 1, bias=False)

    def forward(self, x):
        nt, c, h, w = x.shape
        return self.conv(x).reshape(nt * self.stride, c, h, w)


def run_parallel(layers, x, n):
    """x: (N*T, C, H, W) holding n clips; MemBlock's past is its input shifted one step later in time."""
    for layer in layers:
        if isinstance(layer, MemBlock):
            nt, c, h, w = x.shape
            clip = x.reshape(n, nt // n, c, h, w)
            past = F.pad(clip, (0, 0, 0, 0, 0, 0, 1, 0))[:, :-1].reshape(x.shape)
            x = layer(x, past)
        else:
            x = layer(x)
    return x


class TAEHV(nn.Module):
    def __init__(self, patch_size=1, latent_channels=16, decoder_time_upscale=(False, True, True),
                 decoder_space_upscale=(True, True, True)):
        super().__init__()
        p, z = patch_size, latent_channels
        self.patch_size = p
        self.encoder = nn.Sequential(
            conv(3 * p * p, 64), nn.ReLU(inplace=True),
            TPool(64, 2), conv(64, 64, 2, False), MemBlock(64), MemBlock(64), MemBlock(64),
            TPool(64, 2), conv(64, 64, 2, False), MemBlock(64), MemBlock(64), MemBlock(64),
            TPool(64, 1), conv(64, 64, 2, False), MemBlock(64), MemBlock(64), MemBlock(64),
            conv(64, z))
        n_f = [256, 128, 64, 64]
        layers = [Clamp(), conv(z, n_f[0]), nn.ReLU(inplace=True)]
        for s in range(3):
            layers += [MemBlock(n_f[s]), MemBlock(n_f[s]), MemBlock(n_f[s]),
                       nn.Upsample(scale_factor=2 if decoder_space_upscale[s] else 1),
                       TGrow(n_f[s], 2 if decoder_time_upscale[s] else 1), conv(n_f[s], n_f[s + 1], bias=False)]
        layers += [nn.ReLU(inplace=True), conv(n_f[3], 3 * p * p)]
        self.decoder = nn.Sequential(*layers)
        self.t_downscale = 4
        self.frames_to_trim = 2 ** sum(decoder_time_upscale) - 1

    def encode_video(self, x):
        n, t = x.shape[:2]
        if self.patch_size > 1:
            x = F.pixel_unshuffle(x, self.patch_size)
        if t % self.t_downscale:
            pad = self.t_downscale - t % self.t_downscale
            x = torch.cat([x, x[:, -1:].expand(-1, pad, -1, -1, -1)], 1)
        y = run_parallel(self.encoder, x.reshape(-1, *x.shape[2:]), n)
        return y.reshape(n, -1, *y.shape[1:])

    def decode_video(self, z):
        n = z.shape[0]
        x = run_parallel(self.decoder, z.reshape(-1, *z.shape[2:]), n)
        x = x.reshape(n, -1, *x.shape[1:])
        if self.patch_size > 1:
            x = F.pixel_shuffle(x, self.patch_size)
        return x.clamp(0, 1)[:, self.frames_to_trim:]


def read_safetensors(path):
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        b, e = spec["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + e])
        out[name] = torch.frombuffer(raw, dtype=dtypes[spec["dtype"]]).reshape(spec["shape"]) if raw else \
            torch.zeros(spec["shape"], dtype=dtypes[spec["dtype"]])
    return out


def check_reference(ref_dir):
    cases = {"taehv": ("taehv.f16.safetensors", {}),
             "taew2_2": ("taew2_2.f16.safetensors", {"patch_size": 2, "latent_channels": 48}),
             "taehv_preview": ("taehv.f16.safetensors", {"decoder_time_upscale": (False, False, False)})}
    worst = 0.0
    for name, (weights, kw) in cases.items():
        model = TAEHV(**kw)
        sd = {k: v.float() for k, v in read_safetensors(f"{ref_dir}/{weights}").items()}
        own = model.state_dict()
        for k in sd:
            if sd[k].shape[0] > own[k].shape[0]:
                sd[k] = sd[k][-own[k].shape[0]:]
        model.load_state_dict(sd)
        io = read_safetensors(f"{ref_dir}/{name}.public.io.safetensors")
        with torch.no_grad():
            for got, want in ((model.encode_video(io["input"]), io["latents"]),
                              (model.decode_video(io["latents"]), io["frames"]),
                              (model.decode_video(io["noise_latents"]), io["noise_frames"])):
                err = (got - want).abs().max().item()
                worst = max(worst, err)
                print(f"{name}: max abs error {err:.2e}")
    print("reference check:", "OK" if worst <= 2e-5 else "FAILED")
    return worst <= 2e-5


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check-reference":
        sys.exit(0 if check_reference(sys.argv[2]) else 1)
    print(__doc__)
