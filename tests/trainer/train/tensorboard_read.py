"""Reads taehv-train's TensorBoard event files with TensorBoard's own reader (event_accumulator) and checks them.

Usage: tensorboard_read.py EVENTS_DIR STEPS LOG_EVERY PREVIEW_EVERY
Checks: every train/* scalar tag the trainer writes is there, at exactly step 1 (the first step is always logged)
and the steps LOG_EVERY, 2*LOG_EVERY, ... <= STEPS (STEPS a multiple of LOG_EVERY),
with finite values; the preview image is there at the PREVIEW_EVERY steps and Pillow decodes it as a PNG of the
size the event says. Prints one line per check; exit 1 on any failure.
"""
import io
import math
import sys

from PIL import Image
from tensorboard.backend.event_processing import event_accumulator

SCALARS = ["train/loss", "train/psnr_db", "train/lr", "train/frames_per_s", "train/step_s", "train/data_wait_s",
           "train/grad_norm"]
IMAGE = "preview/input_top_reconstruction_bottom"


def main():
    events_dir, steps, log_every, preview_every = sys.argv[1], *map(int, sys.argv[2:5])
    acc = event_accumulator.EventAccumulator(events_dir, size_guidance={event_accumulator.SCALARS: 0,
                                                                        event_accumulator.IMAGES: 0})
    acc.Reload()
    tags = acc.Tags()
    failures = []
    want_steps = sorted({1, *range(log_every, steps + 1, log_every)})
    for tag in SCALARS:
        if tag not in tags["scalars"]:
            failures.append(f"scalar {tag} missing (have {tags['scalars']})")
            continue
        events = acc.Scalars(tag)
        got = [e.step for e in events]
        if got != want_steps:
            failures.append(f"scalar {tag} at steps {got}, expected {want_steps}")
        if not all(math.isfinite(e.value) for e in events):
            failures.append(f"scalar {tag} has a non-finite value: {[e.value for e in events]}")
        print(f"scalar {tag}: steps {got}, values {[round(e.value, 5) for e in events]}")
    want_previews = list(range(preview_every, steps + 1, preview_every))
    if IMAGE not in tags["images"]:
        failures.append(f"image {IMAGE} missing (have {tags['images']})")
    else:
        images = acc.Images(IMAGE)
        got = [e.step for e in images]
        if got != want_previews:
            failures.append(f"image {IMAGE} at steps {got}, expected {want_previews}")
        for e in images:
            png = e.encoded_image_string
            try:
                decoded = Image.open(io.BytesIO(png))
                decoded.load()
            except Exception as err:  # noqa: BLE001 - any decoder error is the finding
                failures.append(f"image at step {e.step} does not decode: {err}")
                continue
            if decoded.format != "PNG" or decoded.size != (e.width, e.height):
                failures.append(f"image at step {e.step}: {decoded.format} {decoded.size}, event says "
                                f"{e.width}x{e.height}")
            print(f"image {IMAGE} step {e.step}: {e.width}x{e.height}, {len(png)} bytes, decoded")
    for f in failures:
        print("FAIL", f)
    print(f"tensorboard_read: {len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
