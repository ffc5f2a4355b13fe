// Orphaned grandchildren: finding a process's children and adopting what a worker leaves behind.
#pragma once

#include <sys/types.h>

#include <set>

namespace taehv::process {

/// The pids whose parent is `parent`, from /proc/<pid>/stat (works without CONFIG_PROC_CHILDREN).
std::set<pid_t> childrenOf(pid_t parent);

/// Makes this process the child subreaper of its workers for one supervise() (PR_SET_CHILD_SUBREAPER): a
/// process a worker started and then left behind, even one that called setsid() to leave the worker's process
/// group and session, is re-parented to us instead of to init, so we can find it and end it with the job.
/// Restores the previous setting when destroyed. Remembers the children this process had before, which are
/// not ours to kill.
class SubreaperScope {
 public:
  SubreaperScope();
  SubreaperScope(const SubreaperScope&) = delete;
  SubreaperScope& operator=(const SubreaperScope&) = delete;
  ~SubreaperScope();
  /// Orphans come to us (we set it, or we were a subreaper or PID 1 already).
  bool adopts() const;
  /// Children of this process that existed before supervise() started.
  const std::set<pid_t>& earlierChildren() const { return earlier_children_; }

 private:
  bool was_subreaper_ = false;
  bool active_ = false;
  std::set<pid_t> earlier_children_;
};

}  // namespace taehv::process
