// The plugin side of the boundary guard (taehv/plugin_api.h): GuardedBackend, which TAEHV_DEFINE_PLUGIN's factory
// creates, turns whatever a backend throws into the answer the host expects from a failure. The host side is
// tested through taehv-run (cli_test.cc, APluginThatThrowsIsOneErrorNamingIt).
#include "taehv/plugin_api.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace taehv {
namespace {

class Broken final : public Backend {
 public:
  Detection detect(const HostContext&) const override { throw std::runtime_error("no env"); }
  PlanResult plan(const HostContext&, const PlanRequest&) const override { throw std::out_of_range("stoi"); }
  std::vector<OptionSpec> options() const override { throw std::runtime_error("no options"); }
  std::vector<CommandSpec> commands() const override { throw 7; }
  int runCommand(const HostContext&, const std::string&, const CommandArgs&) override {
    throw std::runtime_error("disk full");
  }
  bool takesOverLaunch(const HostContext&, const PlanRequest&) const override { throw std::runtime_error("?"); }
  int launch(const HostContext&, const JobRequest&) override { throw std::runtime_error("no ssh"); }
};

class Working final : public Backend {
 public:
  Detection detect(const HostContext&) const override { return {70, "mine"}; }
  PlanResult plan(const HostContext&, const PlanRequest&) const override {
    PlanResult r;
    r.value.nnodes.set(3, "env N");
    return r;
  }
  int runCommand(const HostContext&, const std::string&, const CommandArgs& args) override {
    return static_cast<int>(args.words.size());
  }
};

TEST(GuardedBackend, TurnsEveryExceptionIntoAFailureAnswer) {
  GuardedBackend<Broken> backend("demo");
  std::vector<std::string> logged;
  HostContext host;
  host.log = [&](LogLevel level, const std::string& m) {
    EXPECT_EQ(level, LogLevel::kError);
    logged.push_back(m);
  };
  EXPECT_EQ(backend.detect(host).confidence, 0);
  EXPECT_EQ(backend.plan(host, {}).error, "demo backend: stoi");
  EXPECT_TRUE(backend.options().empty());
  EXPECT_TRUE(backend.commands().empty());
  EXPECT_EQ(backend.runCommand(host, "submit", {}), 1);
  EXPECT_FALSE(backend.takesOverLaunch(host, {}));
  EXPECT_EQ(backend.launch(host, {}), 1);
  EXPECT_EQ(logged, (std::vector<std::string>{"demo detect: no env", "demo submit: disk full",
                                              "demo takesOverLaunch: ?", "demo launch: no ssh"}));
}

TEST(GuardedBackend, PassesAnswersThrough) {
  GuardedBackend<Working> backend("demo");
  HostContext host;
  EXPECT_EQ(backend.detect(host).confidence, 70);
  EXPECT_EQ(backend.plan(host, {}).value.nnodes.value, 3);
  EXPECT_EQ(backend.runCommand(host, "x", CommandArgs{{}, {"a", "b"}, {}}), 2);
  EXPECT_EQ(backend.launch(host, {}), 2);  // Backend's default: "cannot launch jobs itself"
}

TEST(GuardPluginCall, ReturnsTheBodyOrTheFallback) {
  EXPECT_EQ(guardPluginCall([] { return 1; }, [](const std::string&) { return 2; }), 1);
  std::string seen;
  EXPECT_EQ(guardPluginCall([]() -> int { throw std::runtime_error("x"); },
                            [&](const std::string& what) {
                              seen = what;
                              return 2;
                            }),
            2);
  EXPECT_EQ(seen, "x");
}

}  // namespace
}  // namespace taehv
