// Distributed data parallelism over c10d: the torchrun environment, a TCPStore, a ProcessGroup (Gloo on CPU,
// NCCL with a CUDA libtorch), fail-fast abort through the store, and bucketed gradient all-reduce that
// overlaps backward. c10d types stay out of this header (they are made in src/c10d_backends.h).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "taehv/plugin_api.h"  // kDefaultMasterPort
#include "taehv/train/config.h"  // DistBackend

namespace taehv::train {

/// What taehv-run (or torchrun) tells a worker through the environment.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;  ///< torchrun's default, when MASTER_PORT is unset
  bool from_launcher = false;  ///< RANK and WORLD_SIZE were set
  int omp_num_threads = 0;          ///< OMP_NUM_THREADS, set per worker by taehv-run / torchrun; 0 = unset
  std::string gloo_socket_ifname;   ///< GLOO_SOCKET_IFNAME: Gloo's network interface; empty = chosen as torchrun does
  /// TAEHV_RESUME_STEP: the step taehv-run's node group agreed every node holds (--node-local-checkpoints; 0: none
  /// anywhere, start from scratch); -1 when unset. `--resume latest` then resumes from exactly that step.
  int64_t resume_step = -1;

  /// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, OMP_NUM_THREADS and
  /// GLOO_SOCKET_IFNAME from `env` (the process's: processEnvironment() in taehv/env.h). With no RANK and WORLD_SIZE:
  /// one process, no c10d. Throws std::runtime_error naming the variable when one is malformed or inconsistent.
  static DistEnv fromEnvironment(const Env& env);
};

/// A collective in flight. wait() blocks until it completes and throws if it failed or the run was aborted.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  virtual void wait() = 0;
};

/// Exit status of a rank that stops because another rank failed.
constexpr int kAbortExitCode = 3;

/// One peer's heartbeat as the abort watcher reads it. Every rank's watcher adds 1 to its own counter in the store
/// each period and reads the counter of the next rank (ring order, so W reads per period for W ranks, not W^2):
/// a peer killed outright (SIGKILL, OOM killer, lost host) or frozen announces nothing, and a point-to-point
/// transfer waiting for it would not notice. A rank that stops watching on purpose (its clean end, or a failure
/// it announced itself) sets its counter to kFinished, so a peer that finishes first is never taken as dead.
class PeerLiveness {
 public:
  static constexpr int64_t kFinished = int64_t{1} << 40;
  using Clock = std::chrono::steady_clock;
  /// `silence`: how long the counter may stand still, counted from `start` until it first moves.
  PeerLiveness(Clock::time_point start, std::chrono::milliseconds silence) : seen_(start), silence_(silence) {}
  /// Records the counter read at `now`; true when the peer is to be taken as dead.
  bool dead(int64_t beats, Clock::time_point now) {
    if (beats >= kFinished) return false;
    if (beats_ >= 0 && beats != beats_) seen_ = now;  // it moved (the first reading is only the baseline)
    beats_ = beats;
    return now - seen_ > silence_;
  }

 private:
  int64_t beats_ = -1;
  Clock::time_point seen_;
  std::chrono::milliseconds silence_;
};

/// One process group for the whole run. Thread safety: collectives are issued from one thread at a time
/// (the training thread, or autograd hooks running on it); every rank issues them in the same order.
class Distributed {
 public:
  /// Connects to the store (rank 0 serves it), checks that every rank runs the same config (`shared_settings`:
  /// Config::sharedSettings(); a mismatch throws ConfigError naming the keys that differ, the same line on every
  /// rank) and creates the process group on `backend` (auto: nccl for a CUDA `device`, else gloo).
  /// With world_size 1 no store or group is created and collectives are no-ops.
  Distributed(const DistEnv& env, DistBackend backend, std::chrono::milliseconds timeout,
              const torch::Device& device, const std::string& shared_settings);
  ~Distributed();
  Distributed(const Distributed&) = delete;
  Distributed& operator=(const Distributed&) = delete;

  int rank() const { return env_.rank; }
  int worldSize() const { return env_.world_size; }
  const DistEnv& env() const { return env_; }
  const std::string& backendName() const { return backend_name_; }

  /// Sum-all-reduces `tensor` in place, asynchronously. The tensor must stay untouched until wait().
  std::unique_ptr<PendingCollective> allreduceSumAsync(torch::Tensor tensor);
  /// Blocking sum all-reduce in place.
  void allreduceSum(torch::Tensor tensor);
  /// Blocking all-gather of equal shards: `full` (contiguous, world_size x shard.numel() elements) receives
  /// every rank's `shard` in rank order. With world_size 1 it is a copy.
  void allGather(const torch::Tensor& shard, torch::Tensor full);
  /// One point-to-point transfer: a tensor sent to, or received from, rank `peer`.
  struct Transfer {
    int peer = 0;
    torch::Tensor tensor;  ///< contiguous, on the training device; untouched until wait()
  };
  /// Starts `sends` and `recvs` together (NCCL batches them in one group; Gloo posts each at once, so two ranks
  /// sending to each other never wait for one another). Transfers between two ranks match in the order they
  /// are started, per `tag` (a small number: Gloo's collectives use their own, prefixed slots; allGather uses 1).
  std::unique_ptr<PendingCollective> exchangeAsync(const std::vector<Transfer>& sends,
                                                   const std::vector<Transfer>& recvs, int tag);
  /// Overwrites each tensor (in place) with rank `root`'s values.
  void broadcastFrom(int root, const std::vector<torch::Tensor>& tensors);
  /// broadcastFrom(0, tensors).
  void broadcastFromRank0(const std::vector<torch::Tensor>& tensors) { broadcastFrom(0, tensors); }
  /// Blocks until every rank arrives.
  void barrier();

  /// Tells every rank to stop (this rank failed: `reason` is shown by the others). Never throws.
  void announceFailure(const std::string& reason);
  /// True once another rank announced a failure or the store became unreachable.
  bool aborted() const { return aborted_.load(); }
  /// Stops the watcher thread (before a clean shutdown, so rank 0 tearing down the store is no failure).
  void stopWatching();

 private:
  struct Impl;
  void watch();

  DistEnv env_;
  std::string backend_name_ = "none";
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> stop_watch_{false};
  std::thread watcher_;
};


/// The gradient buckets of GradSync (and of ShardedAdamW, which reduces the same buckets, so stage 1's sums are
/// stage 0's to the bit): indices into `params` in reverse registration order (the order backward produces gradients), a
/// new bucket once the current one holds bucket_mb or more.
std::vector<std::vector<size_t>> gradientBuckets(const std::vector<torch::Tensor>& params, double bucket_mb);

/// Averages gradients across ranks in buckets (~bucket_mb, parameters in reverse registration order, the
/// order backward produces them). A bucket's all-reduce starts as soon as its last gradient is computed,
/// overlapping the rest of backward; buckets are launched in index order on every rank. Only backward passes
/// after setSync(true) communicate (the last micro-step of an accumulation); finish() then waits and writes
/// sum(grads over ranks) / world_size into each parameter's .grad. With all_reduce false (ZeRO-2, which
/// reduce-scatters them itself) it never communicates and holds no buckets: addGrads() still accumulates.
class GradSync {
 public:
  GradSync(Distributed& dist, std::vector<torch::Tensor> params, double bucket_mb, bool all_reduce = true);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  void setSync(bool sync) { sync_ = sync; }
  /// Gradients computed outside backward (SliceBackward, torch::autograd::grad on several threads): while on,
  /// the parameter hooks do nothing. libtorch 1.13 runs no leaf hook in autograd::grad; 2.x may run them, and
  /// then from those threads at once with one slice's gradient each.
  void setManual(bool manual) { manual_ = manual; }
  /// Adds one micro-step's gradients (per parameter, undefined = none) into each parameter's grad, as backward
  /// would; finish() all-reduces them (no overlap with the computation for these).
  void addGrads(const std::vector<torch::Tensor>& grads);
  /// After the synchronising backward: launches what is left, waits, writes averaged grads.
  void finish();
  size_t bucketCount() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::vector<size_t> params;   ///< indices into params_
    std::vector<int64_t> offsets; ///< element offset of each in flat
    torch::Tensor flat;
    size_t ready = 0;
    bool launched = false;
    std::unique_ptr<PendingCollective> pending;
  };
  void onGrad(size_t param, const torch::Tensor& grad);
  void launchReady();

  Distributed& dist_;
  std::vector<torch::Tensor> params_;
  std::vector<size_t> bucket_of_;
  std::vector<size_t> slot_of_;
  std::vector<bool> filled_;
  std::vector<Bucket> buckets_;
  std::vector<unsigned> hooks_;
  size_t next_launch_ = 0;
  bool sync_ = true;
  std::atomic<bool> manual_{false};
};

}  // namespace taehv::train
