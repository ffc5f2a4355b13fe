#include "taehv/train/dist.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "c10d_backends.h"
#include "taehv/env.h"
#include "taehv/log.h"
#include "taehv/parse.h"
#include "taehv/train/config.h"
#include "taehv/train/events.h"  // crc32c

namespace taehv::train {
namespace {

constexpr const char* kAbortKey = "taehv/abort";
/// Each rank's heartbeat counter: this prefix and the rank (PeerLiveness).
constexpr const char* kHeartbeatPrefix = "taehv/alive/";
/// How often each rank looks at the abort key and adds to its heartbeat.
constexpr std::chrono::milliseconds kWatchPeriod{200};
/// A peer whose heartbeat stands still this long is taken as dead: 30 periods, so a watcher thread starved
/// for a few seconds on a loaded host is not, and the others still stop well before any collective timeout.
constexpr std::chrono::milliseconds kPeerSilence{6000};
/// Gloo point-to-point tag of allGather's transfers (collectives use their own, prefixed slots).
constexpr int kAllGatherTag = 1;
/// After another rank failed: time the training thread gets to notice by itself before the process exits.
constexpr std::chrono::milliseconds kAbortGrace{3000};
/// The store keys of the start-time comparison of the ranks' configs (agreeOnSettings).
constexpr const char* kSettingsPrefix = "taehv/config/";
/// On a refusal, how long rank 0 (whose process serves the store) waits for every rank to read the reason.
constexpr std::chrono::milliseconds kSettingsReadWait{10000};

/// `name` as a whole number in [min_value, 2^30], or `fallback` when it is unset or empty.
int envInt(const Env& vars, const char* name, int fallback, int min_value) {
  const Checked<std::optional<int>> read =
      readEnv(vars, name, [&](std::string_view text) { return parseInteger<int>(text, min_value, 1 << 30); },
              "a valid integer >= " + std::to_string(min_value) + " (it is set by taehv-run/torchrun)");
  if (!read.ok()) throw std::runtime_error("environment variable " + read.error);
  return read.value.value_or(fallback);
}

/// Every rank must run rank 0's settings (Config::sharedSettings): ranks whose configs differ (train.steps 3 and
/// 5) otherwise meet in a collective that one of them never joins, and Gloo aborts. Checked through the store before
/// the process group exists. Each rank compares the CRC-32C of its settings with rank 0's; the first rank that differs
/// publishes the keys that do (only a differing rank reads rank 0's whole text); once every rank has compared, every
/// rank throws ConfigError with that same line. Rank 0's process serves the store, so on a refusal it waits (up to
/// kSettingsReadWait) until every rank has read the line before it leaves. A rank that never comes is waited for as
/// long as the store's timeout, as the process group would.
void agreeOnSettings(c10d::Store& store, const DistEnv& env, const std::string& settings) {
  const auto key = [](const char* name) { return std::string(kSettingsPrefix) + name; };
  const auto bytes = [](const std::string& text) { return std::vector<uint8_t>(text.begin(), text.end()); };
  const auto text = [](const std::vector<uint8_t>& data) { return std::string(data.begin(), data.end()); };
  const std::string crc = std::to_string(crc32c(settings.data(), settings.size()));
  if (env.rank == 0) {
    store.set(key("rank0"), bytes(settings));
    store.set(key("rank0-crc"), bytes(crc));
  }
  if (text(store.get(key("rank0-crc"))) != crc) {
    const std::string line = settingsDifference(text(store.get(key("rank0"))), 0, settings, env.rank);
    if (store.add(key("differing"), 1) == 1) store.set(key("difference"), bytes(line));  // before "compared"
  }
  if (store.add(key("compared"), 1) == env.world_size) store.set(key("all-compared"), bytes("1"));
  store.get(key("all-compared"));  // blocks until every rank has compared
  const int64_t differing = store.add(key("differing"), 0);
  if (differing == 0) return;
  const std::string difference = text(store.get(key("difference")));
  store.add(key("read"), 1);
  if (env.rank == 0) {
    const auto deadline = std::chrono::steady_clock::now() + kSettingsReadWait;
    while (store.add(key("read"), 0) < env.world_size && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  throw ConfigError("the ranks' configs differ: " + difference +
                    (differing > 1 ? " (" + std::to_string(differing) + " ranks differ from rank 0)" : "") +
                    "; every rank must run the same config: give every node the same --config file and --set values");
}

class WorkHandle : public PendingCollective {
 public:
  /// `keep`: the tensors the collective works on, held until it completes. `result_to`, when defined, receives
  /// keep[0] after completion (the caller's tensor when the collective ran on a device copy of it).
  WorkHandle(c10::intrusive_ptr<c10d::Work> work, std::vector<at::Tensor> keep, const std::atomic<bool>& aborted,
             at::Tensor result_to = {})
      : work_(std::move(work)), keep_(std::move(keep)), aborted_(aborted), result_to_(std::move(result_to)) {}
  void wait() override {
    if (!work_) return;
    // Wait in slices so an abort announced by another rank is noticed even if the peer never answers.
    while (!work_->isCompleted()) {
      if (aborted_.load()) throw std::runtime_error("collective abandoned: another rank failed");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    work_->wait();
    work_.reset();
    if (result_to_.defined()) {
      torch::NoGradGuard no_grad;
      result_to_.copy_(keep_[0]);
      result_to_ = at::Tensor();
    }
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  std::vector<at::Tensor> keep_;
  const std::atomic<bool>& aborted_;
  at::Tensor result_to_;
};

class DoneHandle : public PendingCollective {
 public:
  void wait() override {}
};

/// The Gloo point-to-point works being waited on. Their wait() cannot be sliced to look at the abort flag (they
/// report completion only from wait(), and a wait with a timeout that expires breaks the whole group), and a peer
/// killed mid-transfer does not always end it: a survivor was seen blocked in a send for good. So the abort watcher
/// aborts them here, which ends their wait().
class TransferRegistry {
 public:
  void add(const c10::intrusive_ptr<c10d::Work>& work) {
    std::lock_guard<std::mutex> lock(mu_);
    works_.push_back(work);
    if (aborted_) work->abort();  // the abort came between the caller's check and this registration
  }
  void remove(const c10::intrusive_ptr<c10d::Work>& work) {
    std::lock_guard<std::mutex> lock(mu_);
    works_.erase(std::remove(works_.begin(), works_.end(), work), works_.end());
  }
  void abortAll() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    for (auto& work : works_) work->abort();
  }

 private:
  std::mutex mu_;
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  bool aborted_ = false;
};

/// Gloo transfers, waited on in turn. A peer that dies usually closes its connection, which ends the wait with an
/// error; otherwise the abort watcher ends it (TransferRegistry) once the peer's heartbeat stands still.
class TransfersHandle : public PendingCollective {
 public:
  TransfersHandle(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::vector<std::vector<at::Tensor>> keep,
                  TransferRegistry& registry, const std::atomic<bool>& aborted)
      : works_(std::move(works)), keep_(std::move(keep)), registry_(registry), aborted_(aborted) {
    for (auto& work : works_) registry_.add(work);
  }
  ~TransfersHandle() override { release(); }
  void wait() override {
    for (auto& work : works_) {
      if (!work->wait() || aborted_.load()) {
        release();
        throw std::runtime_error("transfer abandoned: another rank failed");
      }
    }
    release();
  }

 private:
  void release() {
    for (auto& work : works_) registry_.remove(work);
    works_.clear();
    keep_.clear();
  }

  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::vector<std::vector<at::Tensor>> keep_;
  TransferRegistry& registry_;
  const std::atomic<bool>& aborted_;
};

}  // namespace

DistEnv DistEnv::fromEnvironment(const Env& vars) {
  DistEnv env;
  const bool rank = envValue(vars, "RANK").has_value();
  const bool world = envValue(vars, "WORLD_SIZE").has_value();
  if (rank != world) {
    throw std::runtime_error("RANK and WORLD_SIZE must be set together (taehv-run sets both); found only " +
                             std::string(rank ? "RANK" : "WORLD_SIZE"));
  }
  env.omp_num_threads = envInt(vars, "OMP_NUM_THREADS", 0, 1);
  env.gloo_socket_ifname = envValue(vars, "GLOO_SOCKET_IFNAME").value_or("");
  env.resume_step = envInt(vars, "TAEHV_RESUME_STEP", -1, 0);
  if (!rank) return env;
  env.from_launcher = true;
  env.world_size = envInt(vars, "WORLD_SIZE", 1, 1);
  env.rank = envInt(vars, "RANK", 0, 0);
  if (env.rank >= env.world_size) {
    throw std::runtime_error("RANK=" + std::to_string(env.rank) + " is not below WORLD_SIZE=" +
                             std::to_string(env.world_size));
  }
  env.local_rank = envInt(vars, "LOCAL_RANK", 0, 0);
  env.local_world_size = envInt(vars, "LOCAL_WORLD_SIZE", 1, 1);
  if (const std::optional<std::string> addr = envValue(vars, "MASTER_ADDR")) env.master_addr = *addr;
  env.master_port = envInt(vars, "MASTER_PORT", env.master_port, 1);
  if (env.master_port > 65535) throw std::runtime_error("MASTER_PORT must be a TCP port (1-65535)");
  return env;
}

struct Distributed::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  backends::BackendPtr group;
  std::chrono::milliseconds timeout;
  /// Where collectives run. NCCL reduces CUDA tensors only, so host tensors handed to it (the per-step
  /// statistics, the barrier, the resume check) travel through a copy on the training device.
  std::optional<torch::Device> collective_device;
  TransferRegistry transfers;

  at::Tensor onCollectiveDevice(const at::Tensor& t) const {
    return collective_device && t.device() != *collective_device ? t.to(*collective_device) : t;
  }
};

Distributed::Distributed(const DistEnv& env, DistBackend backend, std::chrono::milliseconds timeout,
                         const torch::Device& device, const std::string& shared_settings)
    : env_(env), impl_(std::make_unique<Impl>()) {
  impl_->timeout = timeout;
  if (env_.world_size == 1) return;
  DistBackend chosen = backend;
  if (chosen == DistBackend::kAuto) chosen = device.is_cuda() ? DistBackend::kNccl : DistBackend::kGloo;
#if !defined(TAEHV_WITH_NCCL)
  if (chosen == DistBackend::kNccl) {
    throw ConfigError(
        "dist.backend nccl: this taehv-train was built against a libtorch without CUDA/NCCL (taehv-train --version); "
        "use dist.backend=gloo");
  }
#endif
  if (chosen == DistBackend::kNccl && !device.is_cuda()) {
    throw ConfigError("dist.backend nccl needs a CUDA train.device (NCCL reduces GPU tensors only), got " +
                      device.str() + "; use dist.backend=gloo on the CPU");
  }
  try {
    impl_->store = backends::makeTcpStore(env_.master_addr, env_.master_port, env_.rank == 0, env_.world_size, timeout);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot reach the rendezvous store at " + env_.master_addr + ":" +
                             std::to_string(env_.master_port) + " (MASTER_ADDR/MASTER_PORT): " + e.what());
  }
  agreeOnSettings(*impl_->store, env_, shared_settings);
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("taehv/pg", impl_->store);
#if defined(TAEHV_WITH_NCCL)
  if (chosen == DistBackend::kNccl) {
    impl_->group = backends::makeNccl(prefixed, env_.rank, env_.world_size, timeout);
    impl_->collective_device = device;
  }
#endif
  if (!impl_->group) impl_->group = backends::makeGloo(prefixed, env_.rank, env_.world_size, timeout, env_.master_addr,
                                                         env_.gloo_socket_ifname);
  backend_name_ = chosen == DistBackend::kNccl ? "nccl" : "gloo";
  watcher_ = std::thread([this] { watch(); });
}

Distributed::~Distributed() {
  stopWatching();
  if (impl_) {
    impl_->group.reset();
    impl_->store.reset();
  }
}

void Distributed::stopWatching() {
  stop_watch_ = true;
  if (watcher_.joinable()) watcher_.join();
}

void Distributed::watch() {
  // Its own store connection: the TCPStore client is not meant to be shared between threads.
  c10::intrusive_ptr<c10d::Store> store;
  std::string reason;
  try {
    store = backends::makeTcpStore(env_.master_addr, env_.master_port, false, env_.world_size, impl_->timeout);
    const std::string mine = kHeartbeatPrefix + std::to_string(env_.rank);
    const int peer = (env_.rank + 1) % env_.world_size;
    const std::string theirs = kHeartbeatPrefix + std::to_string(peer);
    PeerLiveness liveness(PeerLiveness::Clock::now(), kPeerSilence);
    while (!stop_watch_) {
      if (store->check({kAbortKey})) {
        auto v = store->get(kAbortKey);
        reason = std::string(v.begin(), v.end());
        break;
      }
      store->add(mine, 1);
      if (liveness.dead(store->add(theirs, 0), PeerLiveness::Clock::now())) {
        // Tell everyone, not only this rank: the peer could not announce its own end.
        reason = "rank " + std::to_string(peer) + " has sent no heartbeat for " +
                 std::to_string(kPeerSilence.count() / 1000) + " s (killed, frozen, or its host is lost)";
        store->set(kAbortKey, std::vector<uint8_t>(reason.begin(), reason.end()));
        break;
      }
      std::this_thread::sleep_for(kWatchPeriod);
    }
    if (stop_watch_) {
      store->add(mine, PeerLiveness::kFinished);  // finished on purpose: the rank watching this one lets it go
      return;
    }
  } catch (const std::exception& e) {
    if (stop_watch_) return;
    reason = std::string("the rendezvous store (served by rank 0) is gone: ") + e.what();
  }
  if (stop_watch_ || reason.empty()) return;
  const bool announced_here = aborted_.exchange(true);
  impl_->transfers.abortAll();
  if (announced_here) return;
  log::error("stopping: " + reason);
  // The training thread may be blocked inside a collective whose peer is gone; give it a moment to unwind,
  // then leave without waiting out the collective timeout.
  const auto deadline = std::chrono::steady_clock::now() + kAbortGrace;
  while (!stop_watch_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!stop_watch_) {
    log::error("exiting (status " + std::to_string(kAbortExitCode) + ") without waiting for the stuck collective");
    std::_Exit(kAbortExitCode);
  }
}

void Distributed::announceFailure(const std::string& reason) {
  const bool was = aborted_.exchange(true);
  if (was || env_.world_size == 1 || !impl_ || !impl_->store) return;
  try {
    const std::string text = "rank " + std::to_string(env_.rank) + " failed: " + reason;
    impl_->store->set(kAbortKey, std::vector<uint8_t>(text.begin(), text.end()));
  } catch (const std::exception&) {
    // The store may already be gone (rank 0 died); the others then notice that instead.
  }
}

std::unique_ptr<PendingCollective> Distributed::allreduceSumAsync(torch::Tensor tensor) {
  if (env_.world_size == 1) return std::make_unique<DoneHandle>();
  if (aborted_) throw std::runtime_error("collective refused: another rank failed");
  std::vector<at::Tensor> tensors{impl_->onCollectiveDevice(tensor)};
  at::Tensor result_to = tensors[0].is_same(tensor) ? at::Tensor() : tensor;
  auto work = impl_->group->allreduce(tensors, c10d::AllreduceOptions{});
  return std::make_unique<WorkHandle>(std::move(work), std::move(tensors), aborted_, std::move(result_to));
}

void Distributed::allreduceSum(torch::Tensor tensor) { allreduceSumAsync(std::move(tensor))->wait(); }

void Distributed::allGather(const torch::Tensor& shard, torch::Tensor full) {
  TORCH_CHECK(full.is_contiguous() && full.numel() == shard.numel() * env_.world_size,
              "allGather: full must be contiguous and hold world_size shards");
  torch::NoGradGuard no_grad;
  if (env_.world_size == 1) {
    full.view(-1).copy_(shard.reshape({-1}));
    return;
  }
  if (aborted_) throw std::runtime_error("collective refused: another rank failed");
  if (!impl_->collective_device) {
    // Gloo: this rank's shard to every other rank and theirs straight into `full`, point to point. c10d's Gloo
    // _allgather_base measured 74 ms for 45 MB at 2 ranks on loopback, twice an all-reduce of all 45 MB (33 ms);
    // the transfers take 16 ms and copy nothing, so the result is the same bits.
    const int64_t n = shard.numel();
    auto flat = full.view({-1});
    auto mine = flat.narrow(0, env_.rank * n, n);
    if (mine.data_ptr() != shard.data_ptr()) mine.copy_(shard.reshape({-1}));
    std::vector<Transfer> sends, recvs;
    for (int peer = 0; peer < env_.world_size; ++peer) {
      if (peer == env_.rank) continue;
      sends.push_back({peer, mine});
      recvs.push_back({peer, flat.narrow(0, peer * n, n)});
    }
    exchangeAsync(sends, recvs, kAllGatherTag)->wait();
    return;
  }
  // NCCL: _allgather_base (allgather_into_tensor) writes one flat output.
  at::Tensor out = impl_->onCollectiveDevice(full);
  at::Tensor in = impl_->onCollectiveDevice(shard.contiguous());
  WorkHandle(impl_->group->_allgather_base(out, in, c10d::AllgatherOptions{}), {out, in}, aborted_,
             out.is_same(full) ? at::Tensor() : full)
      .wait();
}

std::unique_ptr<PendingCollective> Distributed::exchangeAsync(const std::vector<Transfer>& sends,
                                                              const std::vector<Transfer>& recvs, int tag) {
  if (env_.world_size == 1 || (sends.empty() && recvs.empty())) return std::make_unique<DoneHandle>();
  if (aborted_) throw std::runtime_error("collective refused: another rank failed");
  std::vector<std::vector<at::Tensor>> keep;
  keep.reserve(sends.size() + recvs.size());  // c10d takes the vectors by reference: no reallocation
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  const bool batched = impl_->collective_device.has_value();  // NCCL: one group, or two ranks that send to each
                                                              // other first would each wait for the other's receive
  if (batched) impl_->group->startCoalescing();
  for (const auto& t : sends) works.push_back(impl_->group->send(keep.emplace_back(1, t.tensor), t.peer, tag));
  for (const auto& t : recvs) works.push_back(impl_->group->recv(keep.emplace_back(1, t.tensor), t.peer, tag));
  if (batched) {
    std::vector<at::Tensor> tensors;
    for (auto& k : keep) tensors.push_back(k[0]);
    return std::make_unique<WorkHandle>(impl_->group->endCoalescing(), std::move(tensors), aborted_);
  }
  return std::make_unique<TransfersHandle>(std::move(works), std::move(keep), impl_->transfers, aborted_);
}

void Distributed::broadcastFrom(int root, const std::vector<torch::Tensor>& tensors) {
  if (env_.world_size == 1) return;
  for (const auto& t : tensors) {
    // Broadcast a contiguous copy and write it back, so views and non-contiguous parameters work too.
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> buffer{impl_->onCollectiveDevice(t.detach().contiguous().clone())};
    c10d::BroadcastOptions options;
    options.rootRank = root;
    WorkHandle(impl_->group->broadcast(buffer, options), buffer, aborted_).wait();
    t.detach().copy_(buffer[0]);
  }
}

void Distributed::barrier() {
  if (env_.world_size == 1) return;
  allreduceSum(torch::zeros({1}));
}


// ---------------------------------------------------------------------------------------------------------
std::vector<std::vector<size_t>> gradientBuckets(const std::vector<torch::Tensor>& params, double bucket_mb) {
  const int64_t bucket_bytes = std::max<int64_t>(1, static_cast<int64_t>(bucket_mb * 1024 * 1024));
  std::vector<std::vector<size_t>> buckets;
  // Reverse registration order: the decoder's last layers get their gradients first in backward.
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    if (buckets.empty() || bytes >= bucket_bytes) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(k);
    bytes += params[k].numel() * static_cast<int64_t>(params[k].element_size());
  }
  return buckets;
}

GradSync::GradSync(Distributed& dist, std::vector<torch::Tensor> params, double bucket_mb, bool all_reduce)
    : dist_(dist), params_(std::move(params)) {
  if (dist_.worldSize() == 1 || !all_reduce) return;
  bucket_of_.assign(params_.size(), 0);
  slot_of_.assign(params_.size(), 0);
  filled_.assign(params_.size(), false);
  for (const auto& members : gradientBuckets(params_, bucket_mb)) {
    auto& b = buckets_.emplace_back();
    for (const size_t k : members) {
      bucket_of_[k] = buckets_.size() - 1;
      slot_of_[k] = b.params.size();
      b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + params_[b.params.back()].numel());
      b.params.push_back(k);
    }
  }
  for (auto& b : buckets_) {
    const int64_t n = b.offsets.back() + params_[b.params.back()].numel();
    b.flat = torch::zeros({n}, params_[b.params.front()].options().requires_grad(false));
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    hooks_.push_back(params_[k].register_hook([this, k](const torch::Tensor& grad) {
      if (!manual_.load()) onGrad(k, grad);
    }));
  }
}

GradSync::~GradSync() {
  sync_ = false;
  for (size_t k = 0; k < hooks_.size(); ++k) params_[k].remove_hook(hooks_[k]);
  for (auto& b : buckets_) {
    if (b.pending) {
      try {
        b.pending->wait();
      } catch (const std::exception&) {
      }
    }
  }
}

void GradSync::onGrad(size_t k, const torch::Tensor& grad) {
  if (!sync_ || buckets_.empty()) return;
  auto& b = buckets_[bucket_of_[k]];
  if (b.launched || filled_[k]) return;
  torch::NoGradGuard no_grad;
  const auto& p = params_[k];
  auto slot = b.flat.narrow(0, b.offsets[slot_of_[k]], p.numel());
  // This hook runs before autograd adds `grad` into p.grad, which holds the earlier micro-steps' sum.
  if (p.grad().defined()) {
    slot.copy_((p.grad() + grad).reshape({-1}));
  } else {
    slot.copy_(grad.reshape({-1}));
  }
  filled_[k] = true;
  ++b.ready;
  if (b.ready == b.params.size()) launchReady();
}

void GradSync::addGrads(const std::vector<torch::Tensor>& grads) {
  torch::NoGradGuard no_grad;
  // finish() all-reduces the accumulated grads of parameters that no hook reported, i.e. all of these.
  for (size_t k = 0; k < std::min(grads.size(), params_.size()); ++k) {
    if (!grads[k].defined()) continue;
    auto& p = params_[k];
    if (p.grad().defined()) {
      p.mutable_grad().add_(grads[k]);
    } else {
      p.mutable_grad() = grads[k].clone();
    }
  }
}

void GradSync::launchReady() {
  // Strictly in bucket order, so every rank issues the same collectives in the same sequence.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready == buckets_[next_launch_].params.size()) {
    auto& b = buckets_[next_launch_++];
    b.launched = true;
    b.pending = dist_.allreduceSumAsync(b.flat);
  }
}

void GradSync::finish() {
  if (buckets_.empty()) return;
  torch::NoGradGuard no_grad;
  // Parameters that got no gradient this pass contribute their accumulated grad (or zeros).
  for (auto& b : buckets_) {
    if (b.ready == b.params.size()) continue;
    for (size_t s = 0; s < b.params.size(); ++s) {
      const size_t k = b.params[s];
      if (filled_[k]) continue;
      auto slot = b.flat.narrow(0, b.offsets[s], params_[k].numel());
      if (params_[k].grad().defined()) {
        slot.copy_(params_[k].grad().reshape({-1}));
      } else {
        slot.zero_();
      }
      filled_[k] = true;
      ++b.ready;
    }
  }
  launchReady();
  const double scale = 1.0 / dist_.worldSize();
  for (auto& b : buckets_) {
    b.pending->wait();
    b.pending.reset();
    // The average goes straight into .grad (one pass over the bucket; scaling the bucket first and copying it
    // was two; 1.9 ms a step saved on TAEHV's 43 MB of gradients). The bucket keeps the sums; it is refilled next time.
    for (size_t s = 0; s < b.params.size(); ++s) {
      auto& p = params_[b.params[s]];
      auto sum = b.flat.narrow(0, b.offsets[s], p.numel()).view(p.sizes());
      if (p.grad().defined()) {
        at::mul_out(p.mutable_grad(), sum, scale);
      } else {
        p.mutable_grad() = sum.mul(scale);
      }
    }
    b.ready = 0;
    b.launched = false;
  }
  std::fill(filled_.begin(), filled_.end(), false);
  next_launch_ = 0;
}

}  // namespace taehv::train
