// What a training or evaluation run sets up before its first step: the model (loaded, or initialised for training
// from scratch), the device, the threads, and the check that a CPU step fits in memory. Private to taehv::train.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "taehv/model/taehv.h"
#include "taehv/train/config.h"
#include "taehv/train/dist.h"

namespace taehv::train {

/// The model of model.variant on `device`: model.init's weights when given, else initForTraining's random init
/// (seeded by train.seed).
TAEHV makeModel(const Config& cfg, const torch::Device& device);

/// Random init for training from scratch, the final decoder conv's weights scaled by `output_scale` (the reasons
/// are beside its definition).
void initForTraining(TAEHV& model, double output_scale);

/// train.device resolved: cuda[:N] (refused with one line when no GPU is visible), else the CPU. `auto` picks
/// the local rank's GPU when there is one.
torch::Device pickDevice(const Config& cfg, const DistEnv& env);

/// Whether training steps run under bf16 autocast: train.bf16 on a GPU, train.cpu_precision on the CPU (auto: when
/// the CPU computes bf16 natively, AVX512-BF16 or AMX-BF16).
bool bf16Autocast(const Config& cfg, const torch::Device& device);

/// Whether this rank's fp32 CPU convolutions run as Winograd transforms (train.cpu_conv resolved; auto: NNPACK
/// available and no AVX-512). A GPU's never do. train.cpu_conv=winograd where NNPACK cannot run is a ConfigError.
bool cpuWinogradConv(const Config& cfg, const torch::Device& device);

/// train.threads, else OMP_NUM_THREADS (set per worker by taehv-run / torchrun), else the cores / local ranks.
void setThreads(const Config& cfg, const DistEnv& env);

/// Throws ConfigError when a CPU step cannot fit in MemAvailable, with the figures (nothing on a GPU).
void checkCpuMemory(const Config& cfg, const DistEnv& env);

/// The model's parameters with their names, in named_parameters() order (the checkpoint files' keys).
std::vector<std::pair<std::string, torch::Tensor>> namedParams(TAEHV& model);

}  // namespace taehv::train
