// Capturing the stacks of running workers, all threads, for the hang diagnosis (progress.cc): eu-stack (else gdb in
// batch mode) for native processes, py-spy dump for Python interpreters. Every process of a worker's process group
// is dumped (a shell that started python leaves python in its group).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace taehv::process {

/// One worker to dump: its rank, its pid (also its process group), its environment (PATH finds the tools).
struct StackTarget {
  int rank = -1;
  int pid = -1;
  std::map<std::string, std::string> env;
};

/// What was captured of one worker.
struct RankStacks {
  int rank = -1;
  std::string text;        ///< every process's dump, each under a "# rank R pid P: <tool command>" header
  std::string top_frames;  ///< the first frames of the first thread of the group leader, "f0 < f1 < f2", or ""
};

/// Dumps every target's processes, all at once, and gives up on what is still running after `timeout`.
std::vector<RankStacks> captureStacks(const std::vector<StackTarget>& targets, std::chrono::milliseconds timeout);

/// The function names of the first `count` frames of the first thread in a dump by eu-stack, gdb or py-spy.
std::string topFrames(const std::string& dump, std::size_t count);

}  // namespace taehv::process
