// A backend for the core tests, driven by environment variables so each test can set the scene.
// Built several times (tests/core/CMakeLists.txt) with TEST_PLUGIN_NAME and TEST_PLUGIN_KIND:
//   kind 0: a working backend "<name>"; its variables are TEST_<NAME>_* (NAME upper-cased).
//   kind 1: reports api_version 99, and its factory aborts: the loader must never call it.
//   kind 2: exports taehv_plugin_info but no factory.
//   kind 3: exports nothing at all.
//   kind 4: a working backend whose factory returns null.
//   kind 5: a backend whose every method throws, with entry symbols written by hand (without
//           TAEHV_DEFINE_PLUGIN's guard): the host's guard must catch each call.
//   kind 6: a factory that throws.
//   kind 7: a plugin built for API version 2 (info says 2, factory taehv_plugin_create_v2 aborts): refused.
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "taehv/plugin_api.h"

#ifndef TEST_PLUGIN_NAME
#error "TEST_PLUGIN_NAME must be defined"
#endif

namespace {

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

const std::string kVar = "TEST_" + upper(TEST_PLUGIN_NAME) + "_";

const std::string* lookup(const taehv::Env& env, const std::string& key) {
  auto it = env.find(kVar + key);
  return it == env.end() ? nullptr : &it->second;
}

class TestBackend final : public taehv::Backend {
 public:
  taehv::Detection detect(const taehv::HostContext& host) const override {
    taehv::Detection d;
    if (const auto* v = lookup(host.env, "CONFIDENCE")) {
      d.confidence = std::atoi(v->c_str());
      d.reason = kVar + "CONFIDENCE=" + *v;
    }
    return d;
  }

  taehv::PlanResult plan(const taehv::HostContext& host, const taehv::PlanRequest& request) const override {
    taehv::PlanResult r;
    if (const auto* v = lookup(host.env, "FAIL")) {
      r.error = "test failure: " + *v;
      return r;
    }
    auto integer = [&](const char* key, taehv::Sourced<int>& out) {
      if (const auto* v = lookup(host.env, key)) out.set(std::atoi(v->c_str()), "env " + kVar + key);
    };
    integer("NNODES", r.value.nnodes);
    integer("NODE_RANK", r.value.node_rank);
    integer("NPROC", r.value.nproc_per_node);
    integer("MASTER_PORT", r.value.master_port);
    integer("RESTART_COUNT", r.value.restart_count);
    integer("GPUS", r.value.gpus_on_node);
    integer("MASTER_WAIT", r.value.master_wait_seconds);
    if (const auto* v = lookup(host.env, "MASTER_ADDR")) r.value.master_addr.set(*v, "env " + kVar + "MASTER_ADDR");
    if (const auto* v = lookup(host.env, "RANK")) {
      r.value.single_worker.set(true, "rule: test single worker");
      r.value.rank.set(std::atoi(v->c_str()), "env " + kVar + "RANK");
      if (const auto* l = lookup(host.env, "LOCAL_RANK")) {
        r.value.local_rank.set(std::atoi(l->c_str()), "env " + kVar + "LOCAL_RANK");
      }
    }
    r.value.extra_env["TEST_BACKEND"].set(TEST_PLUGIN_NAME, "rule: test backend name");
    r.value.extra_env["RANK"].set("999", "rule: a backend trying to override the contract");
    for (const auto& [name, values] : request.options) {
      std::string joined;
      for (const auto& v : values) joined += (joined.empty() ? "" : ",") + v;
      r.value.extra_env["TEST_OPT_" + name].set(joined, "option --" + name);
    }
    if (request.nproc_per_node) {
      r.value.extra_env["TEST_REQUEST_NPROC"].set(std::to_string(*request.nproc_per_node), "request");
    }
    r.value.notes.push_back("test backend " + std::string(TEST_PLUGIN_NAME));
    return r;
  }

  std::vector<taehv::OptionSpec> options() const override {
    return {{"flavor", "NAME", "a value option", false},
            {"tag", "TAG", "a repeatable option", true},
            {"takeover", "", "make the backend take over the launch", false}};
  }

  std::vector<taehv::CommandSpec> commands() const override {
    return {{"hello",
             "print its options and command",
             {{"greeting", "TEXT", "what to say"},
              {"loud", "", "say it loudly"},
              {"tag", "TAG", "a repeatable option", true},
              {"count", "N", "an option with a one-letter name", false, 'n'}},
             taehv::Operands::kCommand,
             "",
             "Prints what the host parsed."},
            {"words", "print its words", {}, taehv::Operands::kWords, "WORD..."}};
  }

  int runCommand(const taehv::HostContext& host, const std::string& name, const taehv::CommandArgs& args) override {
    std::cout << name << " from " << TEST_PLUGIN_NAME << ":";
    for (const auto& [option, values] : args.options) {
      std::cout << " --" << option;
      for (const auto& v : values) std::cout << " [" << v << "]";
    }
    for (const auto& w : args.words) std::cout << " word [" << w << "]";
    if (!args.command.empty()) std::cout << " --";
    for (const auto& a : args.command) std::cout << " [" << a << "]";
    std::cout << "\n";
    host.log(taehv::LogLevel::kInfo, "hello ran");
    return 5;
  }

  bool takesOverLaunch(const taehv::HostContext&, const taehv::PlanRequest& request) const override {
    return request.options.count("takeover") > 0;
  }

  int launch(const taehv::HostContext&, const taehv::JobRequest& job) override {
    std::cout << "launcher_args:";
    for (const auto& a : job.launcher_args) std::cout << " [" << a << "]";
    const taehv::JobFlags& f = job.flags;
    std::cout << "\nflags:";
    const auto number = [](const char* name, const auto& value) {
      if (value) std::cout << " " << name << "=" << *value;
    };
    number("nnodes", f.nnodes);
    number("min_nnodes", f.min_nnodes);
    number("node_rank", f.node_rank);
    number("master_addr", f.master_addr);
    number("master_port", f.master_port);
    number("max_restarts", f.max_restarts);
    number("restart_count", f.restart_count);
    if (f.shutdown_grace) std::cout << " shutdown_grace_ms=" << f.shutdown_grace->count();
    if (f.standalone) std::cout << " standalone";
    if (f.no_node_group) std::cout << " no_node_group";
    number("nproc_per_node", job.request.nproc_per_node);
    std::cout << "\ncommand:";
    for (const auto& a : job.command) std::cout << " [" << a << "]";
    std::cout << "\n";
    return 7;
  }
};

/// Throws from every method, as a plugin built without TAEHV_DEFINE_PLUGIN's guard may; a method named in
/// TEST_THROWING_SPARE (comma-separated) answers instead, so that a test can reach the later calls.
class ThrowingBackend final : public taehv::Backend {
 public:
  taehv::Detection detect(const taehv::HostContext&) const override {
    if (!spared("detect")) throw std::runtime_error("detect broke");
    return {50, "spared"};
  }
  taehv::PlanResult plan(const taehv::HostContext&, const taehv::PlanRequest&) const override {
    throw std::runtime_error("plan broke");
  }
  std::vector<taehv::OptionSpec> options() const override {
    if (!spared("options")) throw std::runtime_error("options broke");
    return {};
  }
  std::vector<taehv::CommandSpec> commands() const override {
    if (!spared("commands")) throw 42;  // not even a std::exception
    return {{"hello", "throws"}};
  }
  int runCommand(const taehv::HostContext&, const std::string&, const taehv::CommandArgs&) override {
    throw std::runtime_error("runCommand broke");
  }
  bool takesOverLaunch(const taehv::HostContext&, const taehv::PlanRequest&) const override {
    if (!spared("takesOverLaunch")) throw std::runtime_error("takesOverLaunch broke");
    return true;
  }
  int launch(const taehv::HostContext&, const taehv::JobRequest&) override { throw std::runtime_error("launch broke"); }

 private:
  static bool spared(const std::string& method) {
    const char* list = std::getenv("TEST_THROWING_SPARE");
    return list != nullptr && ("," + std::string(list) + ",").find("," + method + ",") != std::string::npos;
  }
};

}  // namespace

#if TEST_PLUGIN_KIND == 0
TAEHV_DEFINE_PLUGIN(TestBackend, TEST_PLUGIN_NAME, "9.8.7", "core test backend")
#elif TEST_PLUGIN_KIND == 1
extern "C" TAEHV_PLUGIN_VISIBLE const taehv_plugin_info_t* taehv_plugin_info() {
  static const taehv_plugin_info_t info{99, TEST_PLUGIN_NAME, "1.0.0", "built for a future API"};
  return &info;
}
extern "C" TAEHV_PLUGIN_VISIBLE taehv::Backend* taehv_plugin_create_v3() { std::abort(); }
#elif TEST_PLUGIN_KIND == 2
extern "C" TAEHV_PLUGIN_VISIBLE const taehv_plugin_info_t* taehv_plugin_info() {
  static const taehv_plugin_info_t info{taehv::kPluginApiVersion, TEST_PLUGIN_NAME, "1.0.0", "no factory"};
  return &info;
}
#elif TEST_PLUGIN_KIND == 3
extern "C" TAEHV_PLUGIN_VISIBLE int taehv_test_unrelated_symbol() { return 42; }
#elif TEST_PLUGIN_KIND == 4
extern "C" TAEHV_PLUGIN_VISIBLE const taehv_plugin_info_t* taehv_plugin_info() {
  static const taehv_plugin_info_t info{taehv::kPluginApiVersion, TEST_PLUGIN_NAME, "1.0.0", "null factory"};
  return &info;
}
extern "C" TAEHV_PLUGIN_VISIBLE taehv::Backend* taehv_plugin_create_v3() { return nullptr; }
#elif TEST_PLUGIN_KIND == 5
extern "C" TAEHV_PLUGIN_VISIBLE const taehv_plugin_info_t* taehv_plugin_info() {
  static const taehv_plugin_info_t info{taehv::kPluginApiVersion, TEST_PLUGIN_NAME, "1.0.0", "throws everywhere"};
  return &info;
}
extern "C" TAEHV_PLUGIN_VISIBLE taehv::Backend* taehv_plugin_create_v3() { return new ThrowingBackend(); }
#elif TEST_PLUGIN_KIND == 6
extern "C" TAEHV_PLUGIN_VISIBLE const taehv_plugin_info_t* taehv_plugin_info() {
  static const taehv_plugin_info_t info{taehv::kPluginApiVersion, TEST_PLUGIN_NAME, "1.0.0", "factory throws"};
  return &info;
}
extern "C" TAEHV_PLUGIN_VISIBLE taehv::Backend* taehv_plugin_create_v3() {
  throw std::runtime_error("factory broke");
}
#elif TEST_PLUGIN_KIND == 7
extern "C" TAEHV_PLUGIN_VISIBLE const taehv_plugin_info_t* taehv_plugin_info() {
  static const taehv_plugin_info_t info{2, TEST_PLUGIN_NAME, "1.0.0", "built for API version 2"};
  return &info;
}
extern "C" TAEHV_PLUGIN_VISIBLE taehv::Backend* taehv_plugin_create_v2() { std::abort(); }
#endif
