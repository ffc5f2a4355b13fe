// The fixture of the loopback training tests on a real etcd (etcd_train_test, etcd_node_local_test): one etcd member
// started per test, a temporary folder (kept when the test failed, for its logs), and three node slots whose
// taehv-run process groups are SIGKILLed at the end of the test.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <string>

#include "etcd_server.h"
#include "infra/built_programs.h"
#include "run_process.h"
#include "training_nodes.h"

namespace taehv::test {

class EtcdTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_TRAINER_OR_ASSERT_BUILT();
    ASSERT_TRUE(etcd_.ok()) << etcd_.error();
    dir_ = tempDir();
  }
  void TearDown() override {
    for (auto& n : nodes_) n.kill();
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  EtcdServer etcd_;
  std::string dir_;
  std::array<TrainNode, 3> nodes_;
};

}  // namespace taehv::test
