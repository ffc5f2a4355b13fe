// The model's sub-commands of taehv-train. Each takes the arguments after the sub-command name
// (e.g. {"--variant", "taehv", "--weights", "w.safetensors", ...}), prints errors to stderr and returns the
// process exit status: 0 on success, 2 on bad usage or bad input (the message says what to fix), 1 otherwise.
#pragma once

#include <string>
#include <vector>

namespace taehv {

/// `encode [--variant V] --weights W --input IN.safetensors|IN.mp4 --output OUT.safetensors [--streaming]
/// [--threads K]`: reads tensor `input` (NTCHW float in [0, 1]), or every frame of a video file (any name not
/// ending in .safetensors; padded as roundtrip pads), and writes tensor `latents` (float32). Without --variant, the
/// variant the weights file is named after (variantForCheckpoint). --streaming feeds StreamingTAEHV frame by frame.
int encodeCommand(const std::vector<std::string>& args);

/// `decode [--variant V] --weights W --input IN.safetensors --output OUT.safetensors [--streaming]
/// [--decoder-time-upscale a,b] [--decoder-space-upscale a,b,c] [--threads K]`: reads tensor `latents`
/// (NTCHW) and writes tensor `frames` (float32 NTCHW in [0, 1]), or, for an --output not ending in .safetensors, an
/// H.264 video at `--fps R` (default 24; N must be 1); --streaming: StreamingTAEHV latent by latent,
/// the frames written into one preallocated output (peak memory: the output plus O(1) frames of activations).
int decodeCommand(const std::vector<std::string>& args);

/// `roundtrip [--variant V] --weights W --input IN.mp4 --output OUT.mp4 [--streaming] [--threads K]`: a video
/// file encoded and decoded (padded to the variant's multiple, cropped back), written as H.264 at the input's
/// frame rate with its frame count; prints `frames=T psnr_db=P ssim=S encode_frames_per_s=E decode_frames_per_s=D
/// frames_per_s=F peak_rss_mb=M` last. A bad video file (unreadable, no video stream, no frames, truncated, an odd
/// width or height) is status 2 with one message, and no output file is made.
int roundtripCommand(const std::vector<std::string>& args);

/// `bench --variant V --batch B --frames T --size S --steps N [--warmup W] [--threads K] [--device cpu|cuda]
/// [--precision fp32|bf16] [--optimizer fused|torch] [--allocator tuned|default]
/// [--memory-format contiguous|channels_last] [--profile TRACE.json]`: times full training steps (MSE of
/// decode(encode(x)) against the aligned input frames: decoded frame j vs input frame j; backward; AdamW lr 3e-4,
/// betas (0.9, 0.95), weight decay 1e-2) on random data. Prints one line per step, then
/// `cpu_s_per_step=C minor_faults_per_step=F`, and last `frames_per_s=X step_s=Y peak_rss_mb=Z`
/// (frames_per_s = B*T / step_s, step_s = mean wall seconds of the N timed steps after W warm-up steps).
/// --device cuda without a GPU is a usage error (status 2).
int benchCommand(const std::vector<std::string>& args);

}  // namespace taehv
