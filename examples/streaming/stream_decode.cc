// Live decoding with StreamingTAEHV: latents in one at a time (as a video or world model makes them), frames out
// as soon as each exists. Only the header taehv/model/streaming.h is used; built with the project (CI) as
// taehv-stream-decode-example. Usage: taehv-stream-decode-example WEIGHTS.safetensors (e.g. taew2_2.safetensors).
#include <cstdio>

#include "taehv/model/safetensors.h"
#include "taehv/model/streaming.h"

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: %s WEIGHTS.safetensors\n", argv[0]), 2;
  taehv::TAEHV model(taehv::TAEHVOptions::forVariant(taehv::variantForCheckpoint(argv[1])));
  taehv::loadWeights(*model, argv[1]);
  model->eval();
  taehv::StreamingTAEHV stream(model);
  const int64_t channels = model->options().latent_channels;
  for (int step = 0; step < 8; ++step) {
    torch::Tensor latent = torch::randn({1, 1, channels, 8, 8});  // stand-in for the generator's next latent
    // decode(latent) gives the latent's first frame; decode() the rest, one by one, until it returns nothing.
    for (auto frame = stream.decode(latent); frame; frame = stream.decode()) {
      std::printf("latent %d -> frame %lld x %lld, mean %.3f\n", step, static_cast<long long>(frame->size(3)),
                  static_cast<long long>(frame->size(4)), frame->mean().item<double>());
    }
  }
  for (const auto& frame : stream.flushDecoder()) std::printf("flushed frame, mean %.3f\n", frame.mean().item<double>());
}
