// One CPU training step's forward and backward as S slices of the batch on S threads at once, each slice running
// all of its ops with (threads / S) intra-op threads, instead of one pass whose every op is split across all the
// threads. Every small op of a one-pass step (ReLU, add, cat, upsample, the reorders around each oneDNN
// convolution) is a parallel region of its own with idle threads at its edges; slices keep every core busy
// (2 x 12 x 64x64 on 2 cores: ~1.09 s -> ~0.96 s per step).
//
// Same gradients as one pass up to float rounding, and deterministic: slice gradients are summed in slice order
// on the caller's thread, never accumulated concurrently.
#pragma once

#include <torch/torch.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace taehv {

class SliceBackward {
 public:
  /// `loss_of(slice, begin, end)`: the loss of batch samples [begin, end), already scaled by their share of the
  /// batch when the whole loss is a batch mean. Runs on the slice's thread, with gradients enabled.
  using LossOf = std::function<torch::Tensor(int slice, int64_t begin, int64_t end)>;

  /// How a CPU step with `threads` intra-op threads and `batch` samples is sliced: `requested` slices
  /// (0 = auto: min(threads, batch)), each with max(1, threads / slices) intra-op threads.
  struct Plan {
    int slices = 1;
    int intra_threads = 1;  ///< each op's threads, also for one slice (then the caller's: all `threads`)
  };
  static Plan plan(int requested, int threads, int64_t batch);

  /// Starts `plan.slices` worker threads (none for one slice: run() then works on the caller's thread).
  explicit SliceBackward(Plan plan);
  ~SliceBackward();
  SliceBackward(const SliceBackward&) = delete;
  SliceBackward& operator=(const SliceBackward&) = delete;

  int slices() const { return plan_.slices; }

  /// Splits [0, batch) into contiguous ranges whose sizes differ by at most one (a slice with no sample is
  /// skipped), evaluates `loss_of` for each on its own thread and differentiates it with respect to `params`.
  /// Returns per parameter the sum over the slices of their gradients (undefined where no slice reached the
  /// parameter) and in `losses` each slice's detached loss. An exception in a slice is rethrown here.
  std::vector<torch::Tensor> run(int64_t batch, const std::vector<torch::Tensor>& params, const LossOf& loss_of,
                                 std::vector<torch::Tensor>* losses = nullptr);

 private:
  struct Job {
    int64_t begin = 0, end = 0;
    std::vector<torch::Tensor> grads;
    torch::Tensor loss;
    std::exception_ptr error;
  };
  void work(int slice);
  void runSlice(int slice);

  Plan plan_;
  std::vector<std::thread> threads_;
  std::vector<Job> jobs_;
  const std::vector<torch::Tensor>* params_ = nullptr;
  const LossOf* loss_of_ = nullptr;
  std::mutex mutex_;
  std::condition_variable start_, done_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace taehv
