// What the container renderers (k8s render, pai render) share: the options they start with, and the check of the
// container image a rendered job runs before it reaches a pod spec.
#pragma once

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "taehv/plugin_api.h"

#include "taehv/checked.h"

namespace taehv::torch_env {

/// Succeeds when `image` is a container image reference as the OCI distribution spec writes them:
/// [REGISTRY[:PORT]/]PATH[:TAG][@ALGO:HEX], PATH lower-case components separated by '/', with '.', '_', '-'
/// inside them, at most 512 characters; else fails with one line naming --image and what a reference looks like.
/// Spaces, quotes and shell characters never pass.
Status checkImageReference(const std::string& image);

/// The options a container renderer's sub-commands start with, in this order: --nodes N and --gpus-per-node G
/// (`nodes_help`, `gpus_help`: what they count on the platform), --image IMAGE, --name NAME (`name_help`). The
/// renderer appends its own.
std::vector<OptionSpec> renderJobOptions(const std::string& nodes_help, const std::string& gpus_help,
                                         const std::string& name_help);

/// Reads what a renderer puts in the job as text: each target gets the value of its option in `args` (for the options
/// given; the renderer checks the value's form after), and `command` the words after --. A rendered job is YAML or
/// JSON, UTF-8 only, and these are values the job runs with: one that is not valid UTF-8 is refused with one line
/// naming the option or word and the byte (taehv/utf8.h's requireUtf8), never altered.
Status readJobText(const CommandArgs& args, std::initializer_list<std::pair<const char*, std::string*>> targets,
                   std::vector<std::string>& command);

}  // namespace taehv::torch_env
