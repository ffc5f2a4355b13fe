// taehv-train: the worker taehv-run launches. A table of sub-commands; no sub-command means `train`.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "taehv/model/commands.h"
#include "taehv/train/build_info.h"
#include "taehv/train/commands.h"
#include "taehv/train/config.h"

namespace {

struct SubCommand {
  const char* name;
  int (*run)(const std::vector<std::string>& args);
  const char* help;
};

constexpr SubCommand kCommands[] = {
    {"train", taehv::train::trainCommand, "train TAEHV data-parallel (the default; see train --help)"},
    {"eval", taehv::train::evalCommand, "PSNR and SSIM of a checkpoint on a dataset"},
    {"encode", taehv::encodeCommand, "frames (safetensors or a video file) -> latents"},
    {"decode", taehv::decodeCommand, "latents (safetensors) -> frames (safetensors or an H.264 video)"},
    {"roundtrip", taehv::roundtripCommand, "a video file encoded and decoded: H.264 out, PSNR, SSIM, frames/s"},
    {"bench", taehv::benchCommand, "time training steps of the model on random data"},
};

void usage(FILE* out) {
  std::fputs("usage: taehv-train [SUB-COMMAND] [ARGS...]\n", out);
  for (const auto& c : kCommands) std::fprintf(out, "  %-9s %s\n", c.name, c.help);
  std::fputs("With no sub-command (or only options) taehv-train trains. --version: the libtorch, CUDA and NCCL it was "
             "built with.\n",
             out);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    usage(stdout);
    return 0;
  }
  if (args.size() == 1 && args[0] == "--version") {
    std::fputs(taehv::train::versionText().c_str(), stdout);
    return 0;
  }
  if (args.empty() || args[0].rfind("-", 0) == 0) return taehv::train::trainCommand(args);
  for (const auto& c : kCommands) {
    if (args[0] == c.name) return c.run(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  std::vector<std::string> names;
  for (const auto& c : kCommands) names.emplace_back(c.name);
  std::fprintf(stderr, "taehv-train: unknown sub-command '%s'; did you mean '%s'?\n", args[0].c_str(),
               taehv::train::closestName(args[0], names).c_str());
  usage(stderr);
  return 2;
}
