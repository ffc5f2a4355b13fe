// A watch on a range of etcd keys, on its own thread and connection (EtcdClient is not thread-safe): the range as
// it is, then every change to it, in order, for as long as the watch lives (PROTOCOL.md, "The etcd group").
//
// Contract: the owner's handler is called on the watch's thread, first with the whole range (a snapshot), then
// with each batch of changes in revision order; never two calls at once, and none after stop() returned. A broken
// stream (a member stopped, cut off from its leader, silent for the idle time) is opened again at the next
// endpoint from the revision after the last change handed over: nothing is missed and nothing repeated. When
// etcd compacted that revision away, the range is read again and handed over as a new snapshot. stop() returns
// within about kEtcdStopCheck plus one call's timeout, whatever etcd does.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "taehv/group/etcd_client.h"

namespace taehv::group {

/// A quiet watch gets etcd's progress note within this; a stream silent for longer is taken for a dead one.
inline constexpr std::chrono::milliseconds kEtcdWatchIdle{30000};

/// One handing-over of a watch: a snapshot of the range (`snapshot`, `kvs`) or changes (`events`).
struct EtcdWatchUpdate {
  bool snapshot = false;  ///< `kvs` is the whole range as of `revision`: it replaces what the owner had
  std::vector<EtcdKeyValue> kvs;
  std::vector<EtcdWatchEvent> events;
};

class EtcdWatch {
 public:
  using Handler = std::function<void(EtcdWatchUpdate)>;

  /// Watches [key, range_end) through `endpoints` until stop() or destruction.
  EtcdWatch(std::vector<EtcdEndpoint> endpoints, std::string key, std::string range_end, Handler handler,
            std::chrono::milliseconds idle = kEtcdWatchIdle);
  ~EtcdWatch();
  EtcdWatch(const EtcdWatch&) = delete;
  EtcdWatch& operator=(const EtcdWatch&) = delete;

  /// Ends the watch; after it returns the handler is not called again.
  void stop();

  /// Why the watch is not streaming right now ("" while it is, or before the first try).
  std::string error() const;

 private:
  void run();
  void setError(const std::string& error);
  /// Waits `d` or until stop(); false when stopped.
  bool pause(std::chrono::milliseconds d);

  std::vector<EtcdEndpoint> endpoints_;
  const std::string key_, range_end_;
  Handler handler_;
  const std::chrono::milliseconds idle_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string error_;
  std::thread thread_;
};

}  // namespace taehv::group
