#include "taehv/suggest.h"

#include <gtest/gtest.h>

namespace taehv {
namespace {

TEST(Suggest, NearNamesAreOfferedFarOnesAreNot) {
  EXPECT_EQ(didYouMean("slurn", {"slurm", "ssh", "k8s"}), " (did you mean 'slurm'?)");
  EXPECT_EQ(didYouMean("descibe", {"describe", "plugins"}), " (did you mean 'describe'?)");
  EXPECT_EQ(didYouMean("--nproc", {"--nproc-per-node", "--nnodes"}), " (did you mean '--nproc-per-node'?)");
  EXPECT_EQ(didYouMean("kubernetes", {"slurm", "ssh"}), "");
  EXPECT_EQ(editDistance("kitten", "sitting"), 3);
}

}  // namespace
}  // namespace taehv
