// The environment contract between taehv-run and a worker: exactly what torchrun gives its workers, so any
// PyTorch script runs unchanged, plus TAEHV_NODE_RANK / TAEHV_NNODES and the backend's extra variables.
#pragma once

#include <map>
#include <string>

#include "taehv/descriptor.h"
#include "taehv/plugin_api.h"

namespace taehv {

/// Fills `worker.env` with every variable taehv-run sets for this worker, each with its provenance:
///   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK (= node rank), GROUP_WORLD_SIZE (= nnodes),
///   ROLE_RANK (= RANK: one role), ROLE_WORLD_SIZE (= WORLD_SIZE), ROLE_NAME (--role, else "default"),
///   MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
///   TORCHELASTIC_USE_AGENT_STORE ("False": no agent store), TORCH_NCCL_ASYNC_ERROR_HANDLING (inherited, else "1"),
///   TORCHELASTIC_SIGNALS_TO_HANDLE (the signals forwarded),
///   OMP_NUM_THREADS (inherited value if set, else max(1, cpu cores / local workers)), TAEHV_NODE_RANK,
///   TAEHV_NNODES, then the node's extra_env (a backend may not override the contract variables above).
/// This is the one place worker environments are made: launch, describe and single-worker exec all call it.
/// `inherited` is taehv-run's own environment.
void buildWorkerEnvironment(const NodeDescriptor& node, WorkerDescriptor& worker, const Env& inherited);

/// `inherited` with `worker.env` laid over it: the complete environment of the worker process.
Env completeEnvironment(const WorkerDescriptor& worker, const Env& inherited);

}  // namespace taehv
