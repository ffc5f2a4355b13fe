"""How sharp a preview's reconstruction is: for each preview PNG (input frames above, reconstruction below, square
frames side by side, as taehv-train writes them), the reconstruction's share of the input's edges: the sum of
|neighbouring-pixel differences| of the reconstruction over that of the input, on the input's edge pixels (a
difference > 0.1 across or down, within a frame). 1 = every edge as steep as in the input; where the input steps
in one pixel, a reconstruction that ramps over n pixels gives ~1/n. Also the preview's PSNR. One preview is one
clip: compare runs on the same clips.

usage: .venv/bin/python bench/recipe/edges.py runs/taehv/previews/eval-step-0001700.png [more.png ...]"""
import sys

import numpy as np
from PIL import Image


def edge_share(png):
    a = np.asarray(Image.open(png).convert("RGB"), dtype=np.float64) / 255
    h = a.shape[0] // 2
    inp, rec = a[:h], a[h:]
    frames = inp.shape[1] // h
    num = den = 0.0
    for f in range(frames):
        x, y = inp[:, f * h:(f + 1) * h], rec[:, f * h:(f + 1) * h]
        for axis in (0, 1):
            dx, dy = np.abs(np.diff(x, axis=axis)), np.abs(np.diff(y, axis=axis))
            edge = dx > 0.1
            num += dy[edge].sum()
            den += dx[edge].sum()
    psnr = -10 * np.log10(max(((inp - rec) ** 2).mean(), 1e-10))
    return num / den, psnr


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for png in sys.argv[1:]:
        share, psnr = edge_share(png)
        print(f"{png}: edge share {share:.3f}, PSNR {psnr:.2f} dB")


if __name__ == "__main__":
    main()
