#include "taehv/pai/pai_job.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <regex>

#include "taehv/env.h"
#include "taehv/parse.h"
#include "taehv/shell_quote.h"
#include "taehv/torch_env/container_image.h"
#include "taehv/torch_env/container_plan.h"
#include "taehv/torch_env/torch_style.h"
#include "taehv/utf8.h"

namespace taehv::pai {

using namespace torch_env;  // the container backends' shared reads and checks (this file only)

namespace {

/// GPUs one DLC node may ask for. No GPU instance has more than 16 today; 64 leaves room for one without letting
/// a typo (99999) through to the platform.
constexpr int kMaxGpusPerNode = 64;
/// CPU cores one node may ask for with --resource-id (ResourceConfig.CPU).
constexpr int kMaxCpusPerNode = 1024;

/// True when MASTER_ADDR has the PAI-DLC shape "dlc<id>-master-0" (documented example dlc18isgeayd****-master-0).
bool looksLikePaiMaster(const Env& env) {
  auto m = envValue(env, "MASTER_ADDR");
  const std::string suffix = "-master-0";
  return m && m->rfind("dlc", 0) == 0 && m->size() > 3 + suffix.size() &&
         m->compare(m->size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Detection detectPai(const Env& env) {
  if (envValue(env, "JOB_COMPLETION_INDEX")) return {0, "JOB_COMPLETION_INDEX set: a Kubernetes Indexed Job"};
  const bool torch_vars = envValue(env, "MASTER_ADDR") || envValue(env, "WORLD_SIZE") || envValue(env, "RANK");
  if (!torch_vars) return {0, "no MASTER_ADDR/WORLD_SIZE/RANK"};
  // DLC runs PyTorch jobs through Kubeflow's operator, so its pods may carry the operator's PET_* variables too:
  // the dlc<id>-master-0 name is DLC's alone and outranks them (the k8s backend claims PET_* pods at 90).
  if (looksLikePaiMaster(env)) {
    return {96, "PAI-DLC: MASTER_ADDR=" + *envValue(env, "MASTER_ADDR") + " has DLC's dlc<id>-master-0 form"};
  }
  if (envValue(env, "NPROC_PER_NODE")) return {80, "PAI-DLC: NPROC_PER_NODE set with MASTER_ADDR/WORLD_SIZE/RANK"};
  return {0, "MASTER_ADDR/WORLD_SIZE/RANK set but no PAI-DLC sign (NPROC_PER_NODE, master dlc*-master-0)"};
}

PlanResult planPai(const Env& env, const PlanRequest& request) {
  PlanResult r =
      planTorchStyle(env, request, {"PAI-DLC", "DLC sets it to the number of nodes (1 master + workers)", true});
  // DLC documents WORLD_SIZE as nodes. Should a DLC image also carry the training-operator's PET_NNODES, the two
  // must agree, or WORLD_SIZE must be PET_NNODES x NPROC_PER_NODE (processes); anything else is a contradiction.
  if (r.ok()) {
    if (auto text = envValue(env, "PET_NNODES")) {
      auto pet = parseCount(*text);
      const int ws = *r.value.nnodes.value;
      const int nproc = r.value.nproc_per_node.has() ? *r.value.nproc_per_node.value : 0;
      if (pet && *pet == ws) {
        r.value.notes.push_back("PET_NNODES=" + *text + " agrees with WORLD_SIZE");
      } else if (pet && *pet >= 1 && nproc > 0 && ws == *pet * nproc) {
        r.value.nnodes.set(*pet, "env PET_NNODES");
        r.value.notes.push_back("WORLD_SIZE=" + std::to_string(ws) + " counts processes here (PET_NNODES=" + *text +
                               " x NPROC_PER_NODE=" + std::to_string(nproc) + "); node count from PET_NNODES");
        if (*r.value.node_rank.value >= *pet) {
          return {"PAI-DLC: node rank " + std::to_string(*r.value.node_rank.value) +
                      " (env RANK) is not below the "
                      "node count " +
                      *text + " (env PET_NNODES)",
                  {}};
        }
      } else {
        return {"PAI-DLC: WORLD_SIZE=" + std::to_string(ws) + " contradicts PET_NNODES=" + *text +
                    (nproc > 0 ? " (nor is it PET_NNODES x NPROC_PER_NODE=" + std::to_string(nproc) + ")" : "") +
                    "; the node's environment is inconsistent",
                {}};
      }
    }
  }
  if (r.ok() && !r.value.nproc_per_node.has()) {
    r.value.notes.push_back("NPROC_PER_NODE not set: workers per node left to taehv-run's GPU detection");
  }
  return r;
}

std::string paiUserCommand(const std::vector<std::string>& command) {
  std::string line = "taehv-run";
  if (!command.empty()) {
    line += " --";
    for (const auto& a : command) line += " " + shellQuote(a);
  }
  return line;
}

std::vector<OptionSpec> paiRenderOptions() {
  std::vector<OptionSpec> options = renderJobOptions("nodes: 1 Master + N-1 Workers",
                                                     "GPUs per node; 0 for CPU-only nodes", "the job's display name");
  options.insert(options.end(),
                 {{"ecs-spec", "TYPE", "public resources: the instance type, e.g. ecs.gn7i-c8g1.2xlarge"},
                  {"resource-id", "QUOTA", "a resource quota (then GPUs come from --gpus-per-node)"},
                  {"workspace-id", "ID", "the PAI workspace"},
                  {"cpu", "N", "with --resource-id: CPU cores per node"},
                  {"memory", "SIZE", "with --resource-id: memory per node, e.g. 256Gi"}});
  return options;
}

std::string paiRenderHelp() {
  return "render prints a PAI-DLC CreateJob request body (JSON, PyTorchJob: 1 Master + N-1 Workers); submit sends\n"
         "it with `aliyun pai-dlc POST /api/v1/jobs --body ...`. Every node runs `taehv-run`. Give exactly one of\n"
         "--ecs-spec and --resource-id.\n";
}

Status parsePaiRenderArgs(const CommandArgs& args, PaiRenderOptions& out) {
  const OptionValues& given = args.options;
  for (const auto& [name, target] :
       {std::pair<std::string, int*>{"nodes", &out.nodes}, {"gpus-per-node", &out.gpus_per_node}}) {
    const std::string* value = optionValue(given, name);
    if (!value) continue;
    const int min_value = name == "nodes" ? 1 : 0;
    const std::optional<int> v = parseCount(*value, min_value, 100000);
    if (!v) return {"--" + name + " " + *value + " is not a whole number >= " + std::to_string(min_value)};
    if (name == "gpus-per-node" && *v > kMaxGpusPerNode) {
      return {"--gpus-per-node " + *value + " is more than any DLC node has (at most " +
             std::to_string(kMaxGpusPerNode) + "); give the GPUs of one node, not of the job"};
    }
    *target = *v;
  }
  if (Status text = readJobText(args,
                                {{"image", &out.image}, {"name", &out.name}, {"ecs-spec", &out.ecs_spec},
                                 {"resource-id", &out.resource_id}, {"workspace-id", &out.workspace_id},
                                 {"cpu", &out.cpu}, {"memory", &out.memory}},
                                out.command);
      !text.ok()) {
    return text;
  }
  if (given.count("cpu") && !parseCount(out.cpu, 1, kMaxCpusPerNode)) {
    return {"--cpu " + out.cpu + " is not a whole number of CPU cores from 1 to " + std::to_string(kMaxCpusPerNode)};
  }
  static const std::regex kQuantity(R"(^[1-9][0-9]{0,5}(Ki|Mi|Gi|Ti)?$)");
  if (given.count("memory") && !std::regex_match(out.memory, kQuantity)) {
    return {"--memory " + out.memory + " is not a size like 256Gi or 512Mi"};
  }
  if (out.nodes < 1) return {"--nodes N is required (the number of nodes: 1 Master + N-1 Workers)"};
  if (!given.count("gpus-per-node")) return {"--gpus-per-node G is required (0 for CPU-only nodes)"};
  if (out.image.empty()) return {"--image IMAGE is required (an image with taehv-run installed)"};
  if (Status image = checkImageReference(out.image); !image.ok()) return image;
  static const std::regex kName(R"(^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$)");
  if (!std::regex_match(out.name, kName)) {
    return {"--name " + out.name + " is not a valid DLC job name: letters, digits, '_' and '-', at most 128"};
  }
  if (out.ecs_spec.empty() == out.resource_id.empty()) {
    return {"give exactly one of --ecs-spec TYPE (public resources, e.g. ecs.gn7i-c8g1.2xlarge) or --resource-id "
           "QUOTA (a resource quota; GPUs then come from --gpus-per-node)"};
  }
  if (!out.ecs_spec.empty() && (!out.cpu.empty() || !out.memory.empty())) {
    return {"--cpu/--memory apply with --resource-id only: with --ecs-spec the instance type fixes them"};
  }
  return {};
}

std::string renderPai(const PaiRenderOptions& o) {
  using Json = nlohmann::ordered_json;
  auto spec = [&](const char* type, int count) {
    Json s;
    s["Type"] = type;
    s["Image"] = o.image;
    s["PodCount"] = count;
    if (!o.ecs_spec.empty()) {
      s["EcsSpec"] = o.ecs_spec;
    } else {
      Json rc = Json::object();
      if (!o.cpu.empty()) rc["CPU"] = o.cpu;
      rc["GPU"] = std::to_string(o.gpus_per_node);
      if (!o.memory.empty()) rc["Memory"] = o.memory;
      s["ResourceConfig"] = rc;
    }
    return s;
  };
  Json body;
  body["DisplayName"] = o.name;
  body["JobType"] = "PyTorchJob";
  if (!o.workspace_id.empty()) body["WorkspaceId"] = o.workspace_id;
  if (!o.resource_id.empty()) body["ResourceId"] = o.resource_id;
  body["JobSpecs"] = Json::array({spec("Master", 1)});
  if (o.nodes > 1) body["JobSpecs"].push_back(spec("Worker", o.nodes - 1));
  body["UserCommand"] = paiUserCommand(o.command);
  // Every text in it was refused unless UTF-8 (readJobText); dumped the one way all the same, so that it never throws.
  return dumpValidUtf8(body, 2) + "\n";
}

}  // namespace taehv::pai
