#include "taehv/train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "taehv/model/output_file.h"
#include "taehv/train/events.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kManifest = "manifest.json";
constexpr const char* kTmpPrefix = ".tmp-";          // a save in progress (or killed): .tmp-checkpoint-STEP-PID
constexpr const char* kOldPrefix = ".old-";          // an intact folder being replaced by a save of its step
constexpr const char* kDamagedPrefix = "damaged-";   // a damaged folder a save of its step moved aside

std::optional<int64_t> stepOfName(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return std::nullopt;
  const std::string digits = name.substr(std::string(kPrefix).size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoll(digits);
}

uint32_t fileCrc(const std::string& path, uint64_t* size) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error("cannot read " + path);
  uint32_t crc = 0;
  uint64_t n_total = 0;
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    crc = crc32c(buf.data(), n, crc);
    n_total += n;
  }
  std::fclose(f);
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
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    const std::string file = e.path().filename().string();
    const bool tmp = file.rfind(kTmpPrefix + std::string(kPrefix), 0) == 0;
    const bool old = file.rfind(kOldPrefix + std::string(kPrefix), 0) == 0;
    if (!tmp && !old) continue;
    // .tmp-checkpoint-STEP-PID: the PID that wrote it. A live process with that PID may be another run's save in
    // progress (two runs in one folder is already an error, but not ours to break): leave those.
    const auto dash = file.rfind('-');
    const std::string pid_text = file.substr(dash + 1);
    if (pid_text.empty() || !std::all_of(pid_text.begin(), pid_text.end(), ::isdigit)) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(pid_text));
    if (pid != getpid() && (::kill(pid, 0) == 0 || errno == EPERM)) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    if (!rm) removed.push_back(e.path().string());
  }
  return removed;
}

bool verifyCheckpoint(const std::string& dir, std::string* why) {
  try {
    std::ifstream in(fs::path(dir) / kManifest);
    if (!in) {
      *why = "no manifest.json (the save was interrupted)";
      return false;
    }
    const auto manifest = nlohmann::json::parse(in);
    for (const auto& [file, info] : manifest.at("files").items()) {
      const std::string path = (fs::path(dir) / file).string();
      if (!fs::exists(path)) {
        *why = file + " is missing";
        return false;
      }
      uint64_t size = 0;
      const uint32_t crc = fileCrc(path, &size);
      if (size != info.at("size").get<uint64_t>()) {
        *why = file + " has " + std::to_string(size) + " bytes, expected " + std::to_string(info.at("size").get<uint64_t>());
        return false;
      }
      if (crc != info.at("crc32c").get<uint32_t>()) {
        *why = file + " fails its checksum";
        return false;
      }
    }
    return true;
  } catch (const std::exception& e) {
    *why = std::string("unreadable manifest.json: ") + e.what();
    return false;
  }
}

int64_t checkpointStep(const std::string& dir) {
  std::ifstream in(fs::path(dir) / kManifest);
  if (!in) throw std::runtime_error(dir + ": no manifest.json");
  return nlohmann::json::parse(in).at("step").get<int64_t>();
}

std::vector<std::pair<int64_t, std::string>> listCheckpoints(const std::string& output_dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(output_dir, ec)) {
    if (!e.is_directory()) continue;
    if (auto step = stepOfName(e.path().filename().string())) out.emplace_back(*step, e.path().string());
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
    std::vector<std::string> damaged;
    for (const auto& [step, path] : listCheckpoints(dir)) {
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
