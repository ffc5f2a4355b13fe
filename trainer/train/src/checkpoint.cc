#include "taehv/train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "taehv/files/input_file.h"
#include "taehv/model/output_file.h"
#include "taehv/parse.h"
#include "taehv/train/events.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kTmpPrefix = ".tmp-";          // a save in progress (or killed): .tmp-checkpoint-STEP-PID
constexpr const char* kOldPrefix = ".old-";          // an intact folder being replaced by a save of its step
constexpr const char* kDamagedPrefix = "damaged-";   // a damaged folder a save of its step moved aside

bool hasCheckpointPrefix(const std::string& name) { return name.rfind(kPrefix, 0) == 0; }

/// STEP of a folder named checkpoint-STEP: digits with a value a step can have; nullopt otherwise.
std::optional<int64_t> stepOfName(const std::string& name) {
  if (!hasCheckpointPrefix(name)) return std::nullopt;
  return parseCount<int64_t>(std::string_view(name).substr(std::string_view(kPrefix).size()));
}

uint32_t fileCrc(const std::string& path, uint64_t* size) {
  // A checkpoint folder may be any folder a user names (eval --checkpoint): types checked before the open.
  const Checked<files::OpenedFile> file = files::openInputFile(path, "checkpoint file", files::Role::kOther);
  if (!file.ok()) throw std::runtime_error(file.error);
  uint32_t crc = 0;
  uint64_t n_total = 0;
  std::vector<char> buf(1 << 20);
  while (true) {
    const ssize_t n = ::read(file.value.fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    crc = crc32c(buf.data(), static_cast<size_t>(n), crc);
    n_total += static_cast<uint64_t>(n);
  }
  *size = n_total;
  return crc;
}

}  // namespace

void fsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string saveCheckpoint(const std::string& output_dir, int64_t step, int64_t keep,
                           const std::function<void(const std::string& tmp_dir)>& write) {
  const std::string name = kPrefix + std::to_string(step);
  const fs::path final_dir = fs::path(output_dir) / name;
  const fs::path tmp = fs::path(output_dir) / (kTmpPrefix + name + "-" + std::to_string(getpid()));
  try {
    fs::create_directories(output_dir);
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    write(tmp.string());
    nlohmann::json manifest;
    manifest["step"] = step;
    nlohmann::json files = nlohmann::json::object();
    for (const auto& e : fs::directory_iterator(tmp)) {
      if (!e.is_regular_file()) continue;
      uint64_t size = 0;
      const uint32_t crc = fileCrc(e.path().string(), &size);
      files[e.path().filename().string()] = {{"size", size}, {"crc32c", crc}};
      fsyncPath(e.path().string());
    }
    manifest["files"] = files;
    const std::string text = manifest.dump(1) + "\n";
    writeFileAtomically((tmp / kManifest).string(),
                        [&](int fd) { return writeAllBytes(fd, text.data(), text.size()); });
    fsyncPath(tmp.string());
    if (fs::exists(final_dir)) {
      // Same step saved again (the final save right after a periodic one, or a run resumed from an earlier
      // checkpoint). An intact folder is replaced; a damaged one is kept aside, never destroyed: it may be all that
      // is left of a run, and a resume could not read it.
      std::string why;
      const bool intact = verifyCheckpoint(final_dir.string(), &why);
      const fs::path aside =
          fs::path(output_dir) / ((intact ? kOldPrefix : kDamagedPrefix) + name + "-" + std::to_string(getpid()));
      fs::rename(final_dir, aside);
      fs::rename(tmp, final_dir);
      if (intact) fs::remove_all(aside);
    } else {
      fs::rename(tmp, final_dir);
    }
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));  // libtorch appends a stack trace to its messages
    const std::string space = what.find("MiB free") == std::string::npos ? " (" + freeSpaceNote(output_dir) + ")" : "";
    throw std::runtime_error("cannot write " + name + " in " + output_dir + ": " + what + space +
                             "; the partial checkpoint was removed");
  }
  fsyncPath(output_dir);
  auto all = listCheckpoints(output_dir);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i].second, ec);
  }
  return final_dir.string();
}

std::vector<std::string> removeStaleTemporaries(const std::string& output_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  // The run owns its output folder (a second run into it is refused), so these are never another process's.
  for (const auto& folder : {fs::path(output_dir), fs::path(output_dir) / "previews"}) {
    for (const auto& e : fs::directory_iterator(folder, ec)) {
      std::error_code rm;
      if (e.is_regular_file(rm) && files::isAtomicWriteTemporary(e.path().filename().string()) && fs::remove(e.path(), rm)) {
        removed.push_back(e.path().string());
      }
    }
  }
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string file = e.path().filename().string();
    const bool tmp = file.rfind(kTmpPrefix + std::string(kPrefix), 0) == 0;
    const bool old = file.rfind(kOldPrefix + std::string(kPrefix), 0) == 0;
    if (!tmp && !old) continue;
    // .tmp-checkpoint-STEP-PID: the PID that wrote it. A live process with that PID may be another run's save in
    // progress (two runs in one folder is already an error, but not ours to break): leave those.
    const auto dash = file.rfind('-');
    const std::optional<pid_t> parsed = parseCount<pid_t>(std::string_view(file).substr(dash + 1), 1);
    if (!parsed) continue;  // no PID: not a temporary of ours
    const pid_t pid = *parsed;
    if (pid != getpid() && (::kill(pid, 0) == 0 || errno == EPERM)) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) removed.push_back(e.path().string());
  }
  return removed;
}

CheckpointManifest parseCheckpointManifest(const std::string& text) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) throw CheckpointError("manifest.json is not a JSON object");
  CheckpointManifest m;
  if (!json.contains("step") || !json["step"].is_number_integer() || json["step"].get<int64_t>() < 0) {
    throw CheckpointError("manifest.json has no step (a whole number >= 0)");
  }
  m.step = json["step"].get<int64_t>();
  if (!json.contains("files") || !json["files"].is_object()) throw CheckpointError("manifest.json has no files");
  for (const auto& [file, info] : json["files"].items()) {
    // A file name, never a path: a manifest must not make the check read outside its folder.
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos) {
      throw CheckpointError("manifest.json names '" + file + "', which is not a file name");
    }
    if (!info.is_object() || !info.contains("size") || !info["size"].is_number_unsigned() ||
        !info.contains("crc32c") || !info["crc32c"].is_number_unsigned() ||
        info["crc32c"].get<uint64_t>() > 0xFFFFFFFFull) {
      throw CheckpointError("manifest.json: the entry of " + file + " lacks a size or a 32-bit crc32c");
    }
    m.files.push_back({file, info["size"].get<uint64_t>(), static_cast<uint32_t>(info["crc32c"].get<uint64_t>())});
  }
  return m;
}

CheckpointState parseCheckpointState(const std::string& text) {
  const auto json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) throw CheckpointError("state.json is not a JSON object");
  auto count = [&](const char* key, bool required, bool signed_ok = false) -> int64_t {
    if (!json.contains(key)) {
      if (required) throw CheckpointError(std::string("state.json has no ") + key);
      return 0;
    }
    if (signed_ok && json[key].is_number_integer()) return json[key].get<int64_t>();
    if (!json[key].is_number_integer() || json[key].get<int64_t>() < 0) {
      throw CheckpointError(std::string("state.json: ") + key + " must be a whole number >= 0");
    }
    return json[key].get<int64_t>();
  };
  CheckpointState st;
  st.step = count("step", true);
  st.samples_consumed = count("samples_consumed", true);
  st.data_skipped = count("data_skipped", false);
  st.world_size = count("world_size", false);
  st.batch_per_rank = count("batch_per_rank", false);
  st.grad_accum = count("grad_accum", false);
  st.seed = count("seed", false, /*signed_ok=*/true);
  st.global_batch = count("global_batch", false);
  if (json.contains("train_seconds")) {
    const auto& t = json["train_seconds"];
    if (!t.is_number() || !std::isfinite(t.get<double>()) || t.get<double>() < 0) {
      throw CheckpointError("state.json: train_seconds must be a number of seconds >= 0");
    }
    st.train_seconds = t.get<double>();
  }
  return st;
}

std::string formatCheckpointState(const CheckpointState& state) {
  nlohmann::json json;
  json["step"] = state.step;
  json["samples_consumed"] = state.samples_consumed;
  json["data_skipped"] = state.data_skipped;
  json["world_size"] = state.world_size;
  json["batch_per_rank"] = state.batch_per_rank;
  json["grad_accum"] = state.grad_accum;
  json["seed"] = state.seed;
  json["global_batch"] = state.global_batch;
  json["train_seconds"] = state.train_seconds;
  return json.dump(1) + "\n";
}

bool verifyCheckpoint(const std::string& dir, std::string* why) {
  const std::string manifest_path = (fs::path(dir) / kManifest).string();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(manifest_path, ec))) {
    *why = "no manifest.json (the save was interrupted)";
    return false;
  }
  const Checked<std::string> text = files::readInputFile(manifest_path, "checkpoint manifest", files::Role::kOther);
  if (!text.ok()) {
    *why = text.error;
    return false;
  }
  CheckpointManifest manifest;
  try {
    manifest = parseCheckpointManifest(text.value);
  } catch (const CheckpointError& e) {
    *why = e.what();
    return false;
  }
  for (const auto& f : manifest.files) {
    const std::string path = (fs::path(dir) / f.name).string();
    uint64_t size = 0;
    uint32_t crc = 0;
    try {
      crc = fileCrc(path, &size);
    } catch (const std::exception& e) {
      *why = e.what();  // names the file: missing, unreadable, or not a regular file
      return false;
    }
    if (size != f.size) {
      *why = f.name + " has " + std::to_string(size) + " bytes, expected " + std::to_string(f.size);
      return false;
    }
    if (crc != f.crc32c) {
      *why = f.name + " fails its checksum";
      return false;
    }
  }
  return true;
}

std::vector<std::pair<int64_t, std::string>> listCheckpoints(const std::string& output_dir,
                                                             std::vector<std::string>* not_steps) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    if (auto step = stepOfName(name)) {
      out.emplace_back(*step, e.path().string());
    } else if (not_steps != nullptr && hasCheckpointPrefix(name)) {
      not_steps->push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

std::optional<std::string> resolveResume(const std::string& resume, const std::string& output_dir,
                                         const std::function<void(const std::string&)>& warn,
                                         const std::string& option) {
  // The newest valid checkpoint in `dir`; the damaged ones newer than it are named. When there are checkpoints and
  // none is valid, refuse: training from step 0 would overwrite them, and they may be repairable (or all there is).
  auto newestValid = [&](const std::string& dir, const std::string& flag) -> std::optional<std::string> {
    std::vector<std::string> damaged, not_steps;
    const auto checkpoints = listCheckpoints(dir, &not_steps);
    for (const auto& path : not_steps) {
      warn(path + " is not a checkpoint-STEP folder (STEP must be a whole number up to " +
           std::to_string(std::numeric_limits<int64_t>::max()) + "): skipped");
    }
    for (const auto& [step, path] : checkpoints) {
      std::string why;
      if (verifyCheckpoint(path, &why)) {
        for (const auto& d : damaged) warn("checkpoint " + d + "; resuming from the older " + path);
        return path;
      }
      damaged.push_back(path + " is damaged (" + why + ")");
    }
    if (damaged.empty()) return std::nullopt;
    std::string list;
    for (const auto& d : damaged) list += "\n  " + d;
    throw CheckpointError(flag + ": every checkpoint in " + dir + " is damaged, so nothing can be resumed:" + list +
                          "\nNothing was changed. Restore a checkpoint (or move the damaged ones away) and run "
                          "again, or train from scratch into another output.dir.");
  };
  const std::string flag = option + " " + resume;
  if (resume == "latest") return newestValid(output_dir, flag);
  if (!fs::is_directory(resume)) {
    throw CheckpointError(flag + ": not a folder; give 'latest' or a checkpoint-STEP folder");
  }
  if (fs::exists(fs::path(resume) / kManifest) || stepOfName(fs::path(resume).filename().string())) {
    std::string why;
    if (!verifyCheckpoint(resume, &why)) {
      throw CheckpointError(flag + ": damaged checkpoint (" + why +
                            "); give its output folder (or 'latest') to fall back to the newest valid checkpoint");
    }
    return resume;
  }
  auto found = newestValid(resume, flag);
  if (!found) throw CheckpointError(flag + ": no checkpoint-STEP folder in it");
  return found;
}

}  // namespace taehv::train
