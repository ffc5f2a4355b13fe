// The prefetching loader (loader.cc): the sample order's clips per rank, a dataset with no readable item.
#include "taehv/train/loader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <vector>

#include "data_test_util.h"
#include "taehv/train/clip_source.h"
#include "taehv/train/events.h"
#include "taehv/train/sample_order.h"

namespace taehv::train {
namespace {

using testing::sampleRequest;
using testing::tempDir;
namespace fs = std::filesystem;

// Each rank's batches are the clips of the global sample order at its positions (same items, same draws), and
// one epoch of 3 ranks x 2 steps x batch 2 reads every item of the dataset once.
TEST(Loader, RanksReadDisjointShardsInTheBackground) {
  const int64_t n = 12, world = 3, batch = 2;
  std::shared_ptr<const ClipSource> source = makeSyntheticSource(n, 1);
  DataConfig data;
  data.frames = 4;
  data.size = 16;
  const SampleOrder order(n, 9);
  std::multiset<int64_t> all;
  for (int64_t r = 0; r < world; ++r) {
    Loader loader(source, data, 9, Loader::Layout{0, 0, 1, world, r, batch}, 2);
    for (int64_t k = 0; k < 2; ++k) {
      const Batch b = loader.next();
      EXPECT_EQ(b.frames.sizes(), (std::vector<int64_t>{2, 4, 3, 16, 16}));
      EXPECT_EQ(b.step, k);
      for (int64_t j = 0; j < batch; ++j) {
        const int64_t position = SampleOrder::position(0, k, 0, r, j, 1, world, batch);
        const int64_t item = order.itemAt(position);
        all.insert(item);
        const Clip expected = source->load(item, sampleRequest(data, order.sampleSeed(position)));
        EXPECT_TRUE(torch::equal(b.frames[j], expected.frames)) << "rank " << r << " step " << k << " sample " << j;
      }
    }
  }
  EXPECT_EQ(std::set<int64_t>(all.begin(), all.end()).size(), all.size()) << "ranks overlapped";
  EXPECT_EQ(static_cast<int64_t>(all.size()), n);
}

TEST(Loader, NoReadableItemIsAFatalErrorNotAHang) {
  const auto dir = tempDir();
  writeFileBytes(dir + "/x.mp4", std::vector<uint8_t>(100, 1));
  writeFileBytes(dir + "/y.webm", std::vector<uint8_t>(100, 2));
  std::shared_ptr<const ClipSource> source = makeFileSource(dir);
  DataConfig data;
  data.frames = 4;
  data.size = 16;
  Loader loader(source, data, 1, Loader::Layout{}, 1);
  EXPECT_THROW(loader.next(), DataError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
