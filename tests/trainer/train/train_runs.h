// Real taehv-train processes for the trainer's integration tests, launched here the way taehv-run launches them
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT in the environment), talking Gloo over loopback, and what
// the tests read back from them (logs, metrics.jsonl, checkpoint weights). Tiny sizes (32x32, 4 frames).
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "checkpoint_weights.h"
#include "infra/free_port.h"

namespace taehv::testing {

using Clock = std::chrono::steady_clock;

/// A fresh folder under /tmp for a test's runs (the test removes it).
inline std::string runDir() {
  char tmpl[] = "/tmp/taehv-dist-XXXXXX";
  return mkdtemp(tmpl);
}

/// The taehv-train under test: $TAEHV_BIN_DIR/taehv-train (ctest sets it), else bin/taehv-train.
inline std::string trainer() {
  const char* bin = std::getenv("TAEHV_BIN_DIR");
  return std::string(bin ? bin : "bin") + "/taehv-train";
}

/// A TCP port free on loopback now, below the ephemeral range (infra/free_port.h).
inline int freePort() { return freeLowPort(); }

/// The processes of one run, their logs and, once waited for, how each ended.
struct Job {
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  std::vector<int> status;  ///< exit code, or 128 + signal
};

/// Starts `world` ranks of taehv-train with `args` (per-rank extra args from `per_rank`, may be empty).
inline Job launch(int world, const std::vector<std::string>& args, const std::string& log_prefix,
           const std::vector<std::vector<std::string>>& per_rank = {},
           const std::vector<std::string>& extra_env = {}) {
  Job job;
  const int port = freePort();
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> argv{trainer()};
    argv.insert(argv.end(), args.begin(), args.end());
    if (static_cast<size_t>(r) < per_rank.size()) argv.insert(argv.end(), per_rank[r].begin(), per_rank[r].end());
    std::vector<std::string> env = extra_env;  // first: getenv returns the first match, so these win
    // These tests check CPU (Gloo) training, exactly: on a machine with a GPU, train.device auto would pick it (and
    // NCCL, which refuses ranks sharing one GPU). A test may still pass TAEHV_DEVICE in extra_env.
    env.push_back("TAEHV_DEVICE=cpu");
    for (char** e = environ; *e; ++e) env.emplace_back(*e);
    if (world > 1) {
      env.push_back("RANK=" + std::to_string(r));
      env.push_back("WORLD_SIZE=" + std::to_string(world));
      env.push_back("LOCAL_RANK=" + std::to_string(r));
      env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(world));
      env.push_back("MASTER_ADDR=127.0.0.1");
      env.push_back("MASTER_PORT=" + std::to_string(port));
    }
    const std::string log = log_prefix + ".rank" + std::to_string(r) + ".log";
    std::vector<char*> cargv, cenv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    for (auto& e : env) cenv.push_back(e.data());
    cenv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execve(cargv[0], cargv.data(), cenv.data());
      _exit(127);
    }
    job.pids.push_back(pid);
    job.logs.push_back(log);
  }
  job.status.assign(static_cast<size_t>(world), -1);
  return job;
}

/// The whole file as text ("" when unreadable).
inline std::string slurp(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "rb")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

/// Waits for every rank (killing all after `timeout_s`). Returns false on timeout.
inline bool wait(Job& job, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  size_t left = job.pids.size();
  while (left > 0) {
    for (size_t i = 0; i < job.pids.size(); ++i) {
      if (job.status[i] != -1) continue;
      int st = 0;
      if (waitpid(job.pids[i], &st, WNOHANG) == job.pids[i]) {
        job.status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --left;
      }
    }
    if (left == 0) break;
    if (Clock::now() > deadline) {
      for (size_t i = 0; i < job.pids.size(); ++i) {
        if (job.status[i] == -1) kill(job.pids[i], SIGKILL);
      }
      for (size_t i = 0; i < job.pids.size(); ++i) {
        if (job.status[i] == -1) waitpid(job.pids[i], nullptr, 0);
      }
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// Waits for the run (timeout_s) and asserts every rank exited 0, with its log when one did not.
inline void expectSuccess(Job& job, double timeout_s = 180) {
  ASSERT_TRUE(wait(job, timeout_s)) << "timed out; rank 0 log:\n" << slurp(job.logs[0]);
  for (size_t i = 0; i < job.pids.size(); ++i) {
    ASSERT_EQ(job.status[i], 0) << "rank " << i << " log:\n" << slurp(job.logs[i]);
  }
}

/// The options of a tiny run (32x32, 4 frames, 1 thread, seed 3) of `steps` steps into `out`.
inline std::vector<std::string> tiny(const std::string& out, int64_t steps) {
  return {"--set", "data.size=32", "--set", "data.frames=4", "--set", "train.threads=1", "--set", "log.every=1",
          "--set", "log.preview_every=0", "--set", "checkpoint.export_safetensors=false", "--set",
          "train.steps=" + std::to_string(steps), "--set", "output.dir=" + out, "--set", "train.seed=3"};
}

/// `a` with a --set for each of `sets`.
inline std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& sets) {
  for (const auto& s : sets) {
    a.push_back("--set");
    a.push_back(s);
  }
  return a;
}

/// `a` then `b`.
inline std::vector<std::string> cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// True when every tensor of `a` equals its namesake in `b` bit for bit.
inline bool bitwiseEqual(const std::map<std::string, torch::Tensor>& a, const std::map<std::string, torch::Tensor>& b) {
  for (const auto& [k, t] : a) {
    if (!torch::equal(t, b.at(k))) return false;
  }
  return true;
}

/// The rows of `out`/metrics.jsonl.
inline std::vector<nlohmann::json> metrics(const std::string& out) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(out + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

/// Waits until rank 0 has logged `step` (returns false after `timeout_s`).
inline bool waitForStep(const std::string& out, int64_t step, double timeout_s) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (Clock::now() < deadline) {
    std::ifstream in(out + "/metrics.jsonl");
    std::string line, last;
    while (std::getline(in, line)) {
      if (!line.empty()) last = line;
    }
    try {
      if (!last.empty() && nlohmann::json::parse(last).at("step").get<int64_t>() >= step) return true;
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Plain SGD makes the update proportional to the averaged gradient, so averaging mistakes (sum instead of
// mean, a missing bucket, a rank left out) show up in the weights; Adam would hide a scale error.
inline const std::vector<std::string> kSgd = {"train.optimizer=sgd", "train.lr=0.5", "train.warmup_steps=0",
                                       "train.grad_clip=0", "train.weight_decay=0", "checkpoint.every=1",
                                       "checkpoint.keep=5", "dist.bucket_mb=4"};

/// ||w_b - w_a|| relative to the size of run a's last two updates.
inline double relativeError(const std::string& a, const std::string& b, int64_t steps) {
  const auto wa = loadTensors(a + "/checkpoint-" + std::to_string(steps) + "/model.pt");
  const auto wb = loadTensors(b + "/checkpoint-" + std::to_string(steps) + "/model.pt");
  const auto wa_prev = loadTensors(a + "/checkpoint-" + std::to_string(steps - 2) + "/model.pt");
  const double update = distance(wa, wa_prev);
  EXPECT_GT(update, 1e-4) << "training did not move the weights; the comparison would be meaningless";
  const double err = distance(wa, wb) / update;
  std::printf("  %s vs %s: |w_b - w_a| / |last two updates| = %.3g (update norm %.3g)\n", a.c_str(), b.c_str(), err,
              update);
  return err;
}

}  // namespace taehv::testing
