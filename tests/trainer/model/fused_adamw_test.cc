// FusedAdamW applies the same update as torch::optim::AdamW (same hyper-parameters), step after step.
#include "taehv/model/fused_adamw.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace taehv {
namespace {

TEST(FusedAdamWTest, MatchesTorchAdamWOverSeveralSteps) {
  testing::useTestThreads();
  torch::manual_seed(7);
  std::vector<torch::Tensor> a;
  std::vector<torch::Tensor> b;
  std::vector<torch::Tensor> initial;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{64, 32, 3, 3}, {100003}, {7}}) {
    const torch::Tensor init = torch::randn(shape);
    initial.push_back(init);
    a.push_back(init.clone().requires_grad_(true));
    b.push_back(init.clone().requires_grad_(true));
  }
  torch::optim::AdamW reference(a, torch::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(1e-2));
  FusedAdamW fused(b, FusedAdamWOptions{});
  for (int step = 0; step < 5; ++step) {
    reference.zero_grad();
    fused.zeroGrad();
    for (std::size_t i = 0; i < a.size(); ++i) {
      const torch::Tensor target = torch::randn(a[i].sizes());
      (a[i] * target).sum().backward();
      (b[i] * target).sum().backward();
    }
    reference.step();
    fused.step();
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    // Parameters move by ~5 x 3e-4 in 5 steps; the two must agree to float rounding.
    EXPECT_LE(testing::maxAbsDiff(a[i], b[i]), 1e-6) << i;
    EXPECT_GT(testing::maxAbsDiff(b[i], initial[i]), 1e-4) << i;  // the update did move them
  }
  // zeroGrad releases gradients rather than filling them.
  fused.zeroGrad();
  EXPECT_FALSE(b[0].grad().defined());
}

/// Two identical parameter sets, each with its torch::optim::AdamW (lr changed between steps, as the schedule does).
struct TwinOptimizers {
  std::vector<torch::Tensor> a, b;
  std::unique_ptr<torch::optim::AdamW> reference, multi;

  explicit TwinOptimizers(const torch::Device& device) {
    torch::manual_seed(11);
    for (const auto& shape : std::vector<std::vector<int64_t>>{{64, 32, 3, 3}, {100003}, {7}}) {
      const torch::Tensor init = torch::randn(shape).to(device);
      a.push_back(init.clone().requires_grad_(true));
      b.push_back(init.clone().requires_grad_(true));
    }
    const auto options = torch::optim::AdamWOptions(3e-4).betas({0.9, 0.95}).weight_decay(1e-2);
    reference = std::make_unique<torch::optim::AdamW>(a, options);
    multi = std::make_unique<torch::optim::AdamW>(b, options);
  }

  void backward(int step) {
    reference->zero_grad();
    multi->zero_grad();
    for (std::size_t i = 0; i < a.size(); ++i) {
      // The last parameter has no gradient at step 1: its state starts a step later, as in torch's step.
      if (step == 1 && i + 1 == a.size()) continue;
      const torch::Tensor target = torch::randn(a[i].sizes()).to(a[i].device());
      (a[i] * target).sum().backward();
      (b[i] * target).sum().backward();
    }
    const double lr = 3e-4 * (step + 1) / 4.0;
    for (auto* o : {reference.get(), multi.get()}) {
      static_cast<torch::optim::AdamWOptions&>(o->param_groups()[0].options()).lr(lr);
    }
  }
};

const torch::optim::AdamWParamState& stateOf(torch::optim::AdamW& optimizer, const torch::Tensor& p) {
  return static_cast<const torch::optim::AdamWParamState&>(*optimizer.state().at(p.unsafeGetTensorImpl()));
}

TEST(FusedAdamWTest, FusedStepMatchesTorchAdamWsStepAndKeepsItsState) {
  testing::useTestThreads();
  TwinOptimizers twins(torch::kCPU);
  for (int step = 0; step < 4; ++step) {
    twins.backward(step);
    twins.reference->step();
    ASSERT_TRUE(stepAdamWFused(*twins.multi));
  }
  // Then torch's own step carries on from the state the fused steps kept.
  twins.backward(4);
  twins.reference->step();
  twins.multi->step();
  for (std::size_t i = 0; i < twins.a.size(); ++i) {
    EXPECT_LE(testing::maxAbsDiff(twins.a[i], twins.b[i]), 1e-6) << i;
    const auto& ra = stateOf(*twins.reference, twins.a[i]);
    const auto& rb = stateOf(*twins.multi, twins.b[i]);
    EXPECT_EQ(ra.step(), rb.step()) << i;
    EXPECT_LE(testing::maxAbsDiff(ra.exp_avg(), rb.exp_avg()), 1e-6) << i;
    EXPECT_LE(testing::maxAbsDiff(ra.exp_avg_sq(), rb.exp_avg_sq()), 1e-6) << i;
  }
  EXPECT_EQ(stateOf(*twins.multi, twins.b.back()).step(), 4);  // it had no gradient at step 1
}

TEST(FusedAdamWTest, FusedStepRefusesWhatItsKernelCannotTakeAndChangesNothing) {
  std::vector<torch::Tensor> params{torch::randn({8}).requires_grad_(true),
                                    torch::randn({4}, torch::kDouble).requires_grad_(true)};
  torch::optim::AdamW optimizer(params, torch::optim::AdamWOptions(1e-3));
  (params[0].sum() + params[1].sum()).backward();
  const torch::Tensor before = params[0].detach().clone();
  EXPECT_FALSE(stepAdamWFused(optimizer));  // a float64 parameter
  EXPECT_TRUE(optimizer.state().empty());
  EXPECT_TRUE(torch::equal(params[0], before));
}

/// ZeRO's shard update relies on this: a tensor updated whole, or as ranges cut anywhere (here at odd offsets,
/// on 2 threads), comes out bit for bit the same.
TEST(FusedAdamWTest, OnePassGivesTheSameBitsWhateverTheSplit) {
  at::set_num_threads(2);  // at::parallel_for cuts the whole tensor's range in two too
  torch::manual_seed(3);
  const int64_t n = 300007;
  const torch::Tensor p0 = torch::randn({n}), g = torch::randn({n}), m0 = torch::randn({n}) * 0.1,
                      v0 = torch::rand({n}) * 0.01;
  const auto c = AdamWCoefficients::at(3, 3e-4, 0.9, 0.95, 1e-2, 1e-8);
  torch::Tensor p = p0.clone(), m = m0.clone(), v = v0.clone();
  adamwOnePass(c, p.data_ptr<float>(), g.const_data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), n);
  torch::Tensor q = p0.clone(), mq = m0.clone(), vq = v0.clone();
  int64_t at = 0;
  for (const int64_t len : {int64_t{5}, int64_t{70001}, int64_t{3}, n - 70009}) {
    adamwOnePass(c, q.data_ptr<float>() + at, g.const_data_ptr<float>() + at, mq.data_ptr<float>() + at,
                 vq.data_ptr<float>() + at, len);
    at += len;
  }
  ASSERT_EQ(at, n);
  EXPECT_TRUE(torch::equal(p, q));
  EXPECT_TRUE(torch::equal(m, mq));
  EXPECT_TRUE(torch::equal(v, vq));
  EXPECT_GT(testing::maxAbsDiff(p, p0), 1e-4);  // it did update
}

TEST(FusedAdamWTest, OnCudaMatchesTheCpuLoopAndTorchAdamW) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  std::vector<torch::Tensor> cpu, gpu;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{64, 32, 3, 3}, {100003}, {7}}) {
    const torch::Tensor init = torch::randn(shape);
    cpu.push_back(init.clone().requires_grad_(true));
    gpu.push_back(init.to(torch::kCUDA).requires_grad_(true));
  }
  FusedAdamW on_cpu(cpu, FusedAdamWOptions{});
  FusedAdamW on_gpu(gpu, FusedAdamWOptions{});
  for (int step = 0; step < 5; ++step) {
    on_cpu.zeroGrad();
    on_gpu.zeroGrad();
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      const torch::Tensor target = torch::randn(cpu[i].sizes());
      (cpu[i] * target).sum().backward();
      (gpu[i] * target.to(torch::kCUDA)).sum().backward();
    }
    on_cpu.step();
    on_gpu.step();
  }
  // The CPU loop and the CUDA kernel round differently (float sqrt and division against the kernel's fused
  // multiply-adds): on an H100 they differed by up to 2.4e-6 after 5 steps, 10 float steps at these values (|p| up
  // to ~4.5); the bound is 4e-6. A formula off (weight decay halved) differs by 1.4e-5 after 5 steps.
  for (std::size_t i = 0; i < cpu.size(); ++i) EXPECT_LE(testing::maxAbsDiff(cpu[i], gpu[i].cpu()), 4e-6) << i;
  TwinOptimizers twins(torch::kCUDA);
  for (int step = 0; step < 4; ++step) {
    twins.backward(step);
    twins.reference->step();
    ASSERT_TRUE(stepAdamWFused(*twins.multi));
  }
  for (std::size_t i = 0; i < twins.a.size(); ++i) {
    EXPECT_LE(testing::maxAbsDiff(twins.a[i].cpu(), twins.b[i].cpu()), 1e-6) << i;
  }
}

}  // namespace
}  // namespace taehv
