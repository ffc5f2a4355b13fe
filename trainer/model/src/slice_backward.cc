#include "taehv/model/slice_backward.h"

#include <ATen/Parallel.h>

#include <algorithm>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace taehv {

SliceBackward::Plan SliceBackward::plan(int requested, int threads, int64_t batch) {
  Plan p;
  threads = std::max(1, threads);
  const int64_t wanted = requested > 0 ? requested : threads;
  p.slices = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(wanted, batch)));
  p.intra_threads = std::max(1, threads / p.slices);
  return p;
}

SliceBackward::SliceBackward(Plan plan) : plan_(plan), jobs_(static_cast<size_t>(std::max(1, plan.slices))) {
  plan_.slices = static_cast<int>(jobs_.size());
  if (plan_.slices == 1) return;
  for (int s = 0; s < plan_.slices; ++s) threads_.emplace_back([this, s] { work(s); });
}

SliceBackward::~SliceBackward() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void SliceBackward::work(int slice) {
  // This thread's own OpenMP team size (an OpenMP setting is per thread): libtorch's first parallel op would
  // otherwise size it from the process-wide thread count.
  at::internal::lazy_init_num_threads();
#if defined(_OPENMP)
  omp_set_num_threads(plan_.intra_threads);
#endif
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    runSlice(slice);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void SliceBackward::runSlice(int slice) {
  Job& job = jobs_[static_cast<size_t>(slice)];
  job.grads.clear();
  job.loss = torch::Tensor();
  job.error = nullptr;
  if (job.begin >= job.end) return;
  try {
    torch::AutoGradMode grad_mode(true);
    torch::Tensor loss = (*loss_of_)(slice, job.begin, job.end);
    // autograd::grad, not backward: nothing is accumulated into .grad from several threads at once.
    job.grads = torch::autograd::grad({loss}, *params_, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                      /*allow_unused=*/true);
    job.loss = loss.detach();
  } catch (...) {
    job.error = std::current_exception();
  }
}

std::vector<torch::Tensor> SliceBackward::run(int64_t batch, const std::vector<torch::Tensor>& params,
                                              const LossOf& loss_of, std::vector<torch::Tensor>* losses) {
  const int64_t n = static_cast<int64_t>(jobs_.size());
  for (int64_t s = 0; s < n; ++s) {
    jobs_[static_cast<size_t>(s)].begin = batch * s / n;
    jobs_[static_cast<size_t>(s)].end = batch * (s + 1) / n;
  }
  params_ = &params;
  loss_of_ = &loss_of;
  if (threads_.empty()) {
    runSlice(0);
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    pending_ = static_cast<int>(threads_.size());
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0; });
  }
  params_ = nullptr;
  loss_of_ = nullptr;
  for (const Job& job : jobs_) {
    if (job.error) std::rethrow_exception(job.error);
  }
  std::vector<torch::Tensor> sum(params.size());
  if (losses) losses->clear();
  torch::NoGradGuard no_grad;
  for (Job& job : jobs_) {
    if (job.grads.empty()) continue;
    if (losses) losses->push_back(job.loss);
    for (size_t k = 0; k < params.size(); ++k) {
      const torch::Tensor& g = job.grads[k];
      if (!g.defined()) continue;
      sum[k] = sum[k].defined() ? sum[k] + g : g;  // out of place: a gradient may be an expanded view
    }
    job.grads.clear();
  }
  return sum;
}

}  // namespace taehv
