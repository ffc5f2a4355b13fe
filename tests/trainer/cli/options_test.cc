// taehv/cli/options.h: the rules every taehv-train sub-command parses its arguments by, and the sub-command table.
#include "taehv/cli/options.h"

#include <gtest/gtest.h>

namespace taehv::cli {
namespace {

Options codec() { return Options().value("weights").value("input").value("threads").flag("streaming"); }

/// The UsageError `parse` throws for `args`, or "" when it throws none.
std::string refusal(const Options& options, const std::vector<std::string>& args) {
  try {
    options.parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Options, ValuesComeAfterAnEqualsSignOrAsTheNextArgument) {
  const Args a = codec().parse({"--weights=w.safetensors", "--input", "in.mp4", "--streaming", "--threads=2"});
  EXPECT_EQ(a.get("weights", ""), "w.safetensors");
  EXPECT_EQ(a.required("input"), "in.mp4");
  EXPECT_TRUE(a.flag("streaming"));
  EXPECT_EQ(a.integer("threads", 1, 1, 8), 2);
  EXPECT_FALSE(a.has("output"));
  EXPECT_EQ(a.get("output", "fallback"), "fallback");
  EXPECT_EQ(codec().parse({"--input", "-1"}).get("input", ""), "-1") << "a value may start with a dash";
  EXPECT_EQ(codec().parse({"--input", "--not-an-option"}).get("input", ""), "--not-an-option");
}

TEST(Options, AnOptionGivenTwiceIsRefusedUnlessRepeatable) {
  EXPECT_EQ(refusal(codec(), {"--input", "a", "--input=b"}), "--input given twice");
  EXPECT_EQ(refusal(codec(), {"--streaming", "--streaming"}), "--streaming given twice");
  const Options train = Options().value("config").repeatable("set");
  const Args a = train.parse({"--set", "train.lr=1", "--config=c.yaml", "--set=train.steps=2", "--set", "a.b=c=d"});
  EXPECT_EQ(a.values("set"), (std::vector<std::string>{"train.lr=1", "train.steps=2", "a.b=c=d"}));
  EXPECT_EQ(a.get("config", ""), "c.yaml");
  EXPECT_TRUE(a.values("absent").empty());
}

TEST(Options, UnknownOptionsNameOnlyCloseKnownOnes) {
  EXPECT_EQ(refusal(codec(), {"--wieghts", "w"}), "unknown option '--wieghts' (did you mean '--weights'?)");
  EXPECT_EQ(refusal(codec(), {"--wieghts=w"}), "unknown option '--wieghts' (did you mean '--weights'?)");
  EXPECT_EQ(refusal(codec(), {"--no-such-option-at-all"}), "unknown option '--no-such-option-at-all'");
  EXPECT_EQ(refusal(codec(), {"-x"}), "unknown option '-x'");
  // Prefixes are not guessed: --stream is not --streaming (but it is offered).
  EXPECT_EQ(refusal(codec(), {"--stream"}), "unknown option '--stream' (did you mean '--streaming'?)");
}

TEST(Options, MissingValuesExtraValuesAndLooseWordsAreRefused) {
  EXPECT_EQ(refusal(codec(), {"--input"}), "--input needs a value");
  EXPECT_EQ(refusal(codec(), {"--input", "--streaming"}), "--input needs a value");
  EXPECT_EQ(refusal(codec(), {"--input", "--threads=2"}), "--input needs a value");
  EXPECT_EQ(refusal(codec(), {"--input="}), "--input needs a value");
  EXPECT_EQ(refusal(codec(), {"--streaming=1"}), "--streaming takes no value");
  EXPECT_EQ(refusal(codec(), {"in.mp4"}), "unexpected argument 'in.mp4' (options start with --)");
  EXPECT_EQ(refusal(codec(), {"--input", "a", "b"}), "unexpected argument 'b' (options start with --)");
}

TEST(Options, RequiredAndIntegerValuesSayWhatIsWrong) {
  const Args a = codec().parse({"--input", "", "--threads", "zero"});
  try {
    a.required("input");
    ADD_FAILURE() << "an empty required value passed";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "missing required option --input");
  }
  try {
    a.integer("threads", 1, 1, 1024);
    ADD_FAILURE() << "'zero' passed as an integer";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "--threads must be an integer in [1, 1024], got 'zero'");
  }
  for (const char* bad : {"0", "1025", "2x", " 2", "1e2"}) {
    EXPECT_THROW(codec().parse({"--threads", bad}).integer("threads", 1, 1, 1024), UsageError) << bad;
  }
  EXPECT_EQ(codec().parse({"--threads", "+7"}).integer("threads", 1, 1, 1024), 7);
}

TEST(Options, HelpWinsOverAnyOtherMistake) {
  EXPECT_TRUE(wantsHelp({"--bogus", "--help"}));
  EXPECT_TRUE(wantsHelp({"-h"}));
  EXPECT_FALSE(wantsHelp({"--helpful"}));
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  bool ran = false;
  EXPECT_EQ(runCommand("usage: x\n", {"--bogus", "-h"}, [&] {
              ran = true;
              return 1;
            }),
            0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "usage: x\n");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_FALSE(ran);
}

TEST(Options, AUsageErrorIsOneMessageThenTheUsageStatusTwo) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int status = runCommand("usage: x\n", {"--bogus"}, [] {
    codec().parse({"--bogus"});
    return 0;
  });
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(status, 2);
  EXPECT_NE(err.find(": error: unknown option '--bogus'\nusage: x\n"), std::string::npos) << err;
}

/// A program whose sub-commands record what they were given.
struct Recorder {
  std::string ran;
  std::vector<std::string> args;
  Program program() {
    const auto command = [this](const std::string& name) {
      return [this, name](const std::vector<std::string>& a) {
        ran = name;
        args = a;
        return 0;
      };
    };
    return Program{"prog", {{"train", command("train"), "the default"}, {"encode", command("encode"), "frames"}},
                   "train", "footer\n", [] { return std::string("prog 1.0\n"); }};
  }
};

TEST(Dispatch, NoSubCommandRunsTheDefaultWithEveryArgument) {
  Recorder r;
  EXPECT_EQ(dispatch(r.program(), {}), 0);
  EXPECT_EQ(r.ran, "train");
  EXPECT_EQ(dispatch(r.program(), {"--set", "a=b"}), 0);
  EXPECT_EQ(r.ran, "train");
  EXPECT_EQ(r.args, (std::vector<std::string>{"--set", "a=b"}));
  EXPECT_EQ(dispatch(r.program(), {"encode", "--input", "x"}), 0);
  EXPECT_EQ(r.ran, "encode");
  EXPECT_EQ(r.args, (std::vector<std::string>{"--input", "x"}));
}

TEST(Dispatch, UnknownSubCommandsNameOnlyCloseOnes) {
  Recorder r;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(dispatch(r.program(), {"encdoe"}), 2);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.rfind("prog: error: unknown sub-command 'encdoe' (did you mean 'encode'?)\nusage: prog", 0), 0u)
      << err;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(dispatch(r.program(), {"zzzzzzzz"}), 2);
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err.rfind("prog: error: unknown sub-command 'zzzzzzzz'\n", 0), 0u) << err;
  EXPECT_EQ(r.ran, "");
}

TEST(Dispatch, HelpAndVersionOfTheProgram) {
  Recorder r;
  for (const char* help : {"--help", "-h", "help"}) {
    ::testing::internal::CaptureStdout();
    EXPECT_EQ(dispatch(r.program(), {help}), 0);
    EXPECT_EQ(::testing::internal::GetCapturedStdout(),
              "usage: prog [SUB-COMMAND] [ARGS...]\n  train     the default\n  encode    frames\nfooter\n");
  }
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(dispatch(r.program(), {"--version"}), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "prog 1.0\n");
  EXPECT_EQ(r.ran, "");
}

}  // namespace
}  // namespace taehv::cli
