#include "taehv/group/etcd_watch.h"

namespace taehv::group {
namespace {

/// Between two tries when etcd answers nothing: a lost member is not hammered.
constexpr std::chrono::milliseconds kRetryPause{500};

}  // namespace

EtcdWatch::EtcdWatch(std::vector<EtcdEndpoint> endpoints, std::string key, std::string range_end, Handler handler,
                     std::chrono::milliseconds idle)
    : endpoints_(std::move(endpoints)),
      key_(std::move(key)),
      range_end_(std::move(range_end)),
      handler_(std::move(handler)),
      idle_(idle) {
  thread_ = std::thread([this] { run(); });
}

EtcdWatch::~EtcdWatch() { stop(); }

void EtcdWatch::stop() {
  stop_ = true;
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

std::string EtcdWatch::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void EtcdWatch::setError(const std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  error_ = error;
}

bool EtcdWatch::pause(std::chrono::milliseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (!stop_ && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(kEtcdStopCheck);
  return !stop_;
}

void EtcdWatch::run() {
  EtcdClient client(endpoints_);
  EtcdWatchEnd resume;  // next_revision 0: the range must be read (first, and after a compaction)
  while (!stop_) {
    if (resume.next_revision == 0) {
      Checked<EtcdRange> range = client.range(key_, range_end_);
      if (!range.ok()) {
        setError(range.error);
        pause(kRetryPause);
        continue;
      }
      resume = {range.value.revision + 1, false};
      EtcdWatchUpdate update;
      update.snapshot = true;
      update.kvs = std::move(range.value.kvs);
      if (stop_) break;
      handler_(std::move(update));
    }
    const Status s = client.watch(key_, range_end_, resume, [this](std::vector<EtcdWatchEvent> events) {
      setError("");
      EtcdWatchUpdate update;
      update.events = std::move(events);
      if (!stop_) handler_(std::move(update));
    }, stop_, idle_);
    if (resume.compacted) {
      resume = {};
      continue;
    }
    if (!s.ok()) {
      setError(s.error);
      pause(kRetryPause);
    }
  }
}

}  // namespace taehv::group
