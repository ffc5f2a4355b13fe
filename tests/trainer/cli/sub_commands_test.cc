// The option rules of taehv/cli/options.h on every sub-command of the real taehv-train, as a user meets them: each
// case is one process that stops at its command line (nothing is trained, encoded or benchmarked).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace {
namespace fs = std::filesystem;

struct Outcome {
  int status = -1;
  std::string out, err;
};

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SubCommands : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/taehv-cli-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// taehv-train `args` (a shell word list) with `env` (NAME=value ...) before it; stdout and stderr apart.
  Outcome taehvTrain(const std::string& args, const std::string& env = "") const {
    const char* bin = std::getenv("TAEHV_BIN_DIR");
    const std::string exe = std::string(bin ? bin : "bin") + "/taehv-train";
    EXPECT_TRUE(fs::exists(exe)) << exe;
    const std::string command = "env -u RANK -u LOCAL_RANK -u GROUP_RANK " + env + " " + exe + " " + args + " > '" +
                                dir_ + "/out' 2> '" + dir_ + "/err'";
    const int status = std::system(command.c_str());
    Outcome r;
    r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = readAll(dir_ + "/out");
    r.err = readAll(dir_ + "/err");
    return r;
  }

  std::string dir_;
};

struct Command {
  std::string name;
  std::string usage_start;  ///< how its --help begins
  std::string typo, meant;  ///< a misspelt option and the one it is close to
  std::string once;         ///< an option taking a value that may be given once
};

const std::vector<Command> kCommands = {
    {"train", "usage: taehv-train [train]", "--confg", "--config", "--config"},
    {"eval", "usage: taehv-train eval", "--checkpont", "--checkpoint", "--checkpoint"},
    {"encode", "usage: taehv-train encode", "--weigths", "--weights", "--weights"},
    {"decode", "usage: taehv-train decode", "--inptu", "--input", "--input"},
    {"roundtrip", "usage: taehv-train roundtrip", "--outptu", "--output", "--output"},
    {"bench", "usage: taehv-train bench", "--stpes", "--steps", "--steps"},
};

TEST_F(SubCommands, EachHasItsOwnHelpOnStdout) {
  for (const auto& c : kCommands) {
    for (const char* help : {"--help", "-h"}) {
      const Outcome r = taehvTrain(c.name + " " + help);
      EXPECT_EQ(r.status, 0) << c.name << r.err;
      EXPECT_EQ(r.out.rfind(c.usage_start, 0), 0u) << c.name << ": " << r.out;
      EXPECT_EQ(r.err, "") << c.name;
    }
  }
}

TEST_F(SubCommands, UnknownOptionsNameOnlyCloseOnes) {
  for (const auto& c : kCommands) {
    Outcome r = taehvTrain(c.name + " " + c.typo + " x");
    EXPECT_EQ(r.status, 2) << c.name << r.err;
    const std::string first = r.err.substr(0, r.err.find('\n'));
    EXPECT_NE(first.find("error: unknown option '" + c.typo + "' (did you mean '" + c.meant + "'?)"),
              std::string::npos)
        << c.name << ": " << r.err;
    r = taehvTrain(c.name + " --quite-unlike-anything");
    EXPECT_EQ(r.status, 2) << c.name << r.err;
    EXPECT_NE(r.err.find("unknown option '--quite-unlike-anything'"), std::string::npos) << c.name << r.err;
    EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << c.name << ": nothing is close: " << r.err;
  }
}

TEST_F(SubCommands, AnOptionGivenTwiceIsRefused) {
  for (const auto& c : kCommands) {
    const Outcome r = taehvTrain(c.name + " " + c.once + " a " + c.once + "=b");
    EXPECT_EQ(r.status, 2) << c.name << r.err;
    EXPECT_NE(r.err.find(c.once + " given twice"), std::string::npos) << c.name << ": " << r.err;
  }
}

TEST_F(SubCommands, ValuesAfterAnEqualsSignOrAsTheNextArgument) {
  std::ofstream(dir_ + "/c.yaml") << "train:\n  steps: 7\n";
  for (const std::string& config : {"--config=" + dir_ + "/c.yaml", "--config " + dir_ + "/c.yaml"}) {
    for (const std::string& sub : {"", "train "}) {
      const Outcome r = taehvTrain(sub + config + " --set=train.lr=0.5 --set data.size=96 --print-config");
      EXPECT_EQ(r.status, 0) << config << r.err;
      EXPECT_NE(r.out.find("  steps: 7  # "), std::string::npos) << config << r.out;  // then the key's range
      EXPECT_NE(r.out.find("  lr: 0.5  # "), std::string::npos) << r.out;
      EXPECT_NE(r.out.find("  size: 96  # "), std::string::npos) << r.out;
    }
  }
  Outcome r = taehvTrain("--stop-at-step=0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--stop-at-step expects a step number >= 1, got '0'"), std::string::npos) << r.err;
  r = taehvTrain("bench --steps=zero");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--steps must be an integer in [1, 1000000], got 'zero'"), std::string::npos) << r.err;
  r = taehvTrain("encode --threads=0");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--threads must be an integer in [1, 1024], got '0'"), std::string::npos) << r.err;
}

TEST_F(SubCommands, MessagesNameTheSubCommandAndWhereTheProcessSits) {
  Outcome r = taehvTrain("eval --bogus");
  EXPECT_EQ(r.err.rfind("taehv-train eval: error: unknown option '--bogus'\n", 0), 0u) << r.err;
  r = taehvTrain("--bogus");
  EXPECT_EQ(r.err.rfind("taehv-train: error: unknown option '--bogus'\n", 0), 0u) << r.err;
  r = taehvTrain("decode --bogus", "GROUP_RANK=1 RANK=3 LOCAL_RANK=0");
  EXPECT_EQ(r.err.rfind("[node 1 rank 3 local 0] taehv-train decode: error: unknown option '--bogus'\n", 0), 0u)
      << r.err;
}

TEST_F(SubCommands, UnknownSubCommandsNameOnlyCloseOnes) {
  Outcome r = taehvTrain("encdoe");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.rfind("taehv-train: error: unknown sub-command 'encdoe' (did you mean 'encode'?)\n", 0), 0u)
      << r.err;
  r = taehvTrain("frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.rfind("taehv-train: error: unknown sub-command 'frobnicate'\nusage: taehv-train", 0), 0u) << r.err;
  r = taehvTrain("--help");
  EXPECT_EQ(r.status, 0);
  for (const auto& c : kCommands) EXPECT_NE(r.out.find("\n  " + c.name + " "), std::string::npos) << r.out;
}

}  // namespace
