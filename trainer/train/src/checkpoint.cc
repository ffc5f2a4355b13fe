#include "taehv/train/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "taehv/train/events.h"

namespace taehv::train {
namespace fs = std::filesystem;
namespace {

constexpr const char* kPrefix = "checkpoint-";
constexpr const char* kManifest = "manifest.json";

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
  fs::create_directories(output_dir);
  const std::string name = kPrefix + std::to_string(step);
  const fs::path final_dir = fs::path(output_dir) / name;
  const fs::path tmp = fs::path(output_dir) / (".tmp-" + name + "-" + std::to_string(getpid()));
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
  {
    std::ofstream out(tmp / kManifest);
    out << manifest.dump(1) << "\n";
    if (!out.flush()) throw std::runtime_error("cannot write " + (tmp / kManifest).string() + ": disk full?");
  }
  fsyncPath((tmp / kManifest).string());
  fsyncPath(tmp.string());
  if (fs::exists(final_dir)) {
    // Same step saved again (e.g. the final save right after a periodic one): move the old one aside first.
    const fs::path old = fs::path(output_dir) / (".old-" + name + "-" + std::to_string(getpid()));
    fs::rename(final_dir, old);
    fs::rename(tmp, final_dir);
    fs::remove_all(old);
  } else {
    fs::rename(tmp, final_dir);
  }
  fsyncPath(output_dir);
  auto all = listCheckpoints(output_dir);
  for (size_t i = static_cast<size_t>(std::max<int64_t>(keep, 1)); i < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i].second, ec);
  }
  return final_dir.string();
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
                                         const std::function<void(const std::string&)>& warn) {
  auto newestValid = [&](const std::string& dir) -> std::optional<std::string> {
    for (const auto& [step, path] : listCheckpoints(dir)) {
      std::string why;
      if (verifyCheckpoint(path, &why)) return path;
      warn("checkpoint " + path + " is damaged (" + why + "); falling back to the previous one");
    }
    return std::nullopt;
  };
  if (resume == "latest") return newestValid(output_dir);
  if (!fs::is_directory(resume)) {
    throw std::runtime_error("--resume " + resume + ": not a folder; give 'latest' or a checkpoint-STEP folder");
  }
  if (fs::exists(fs::path(resume) / kManifest) || stepOfName(fs::path(resume).filename().string())) {
    std::string why;
    if (!verifyCheckpoint(resume, &why)) {
      throw std::runtime_error("--resume " + resume + ": damaged checkpoint (" + why +
                               "); use --resume latest to fall back to the newest valid one");
    }
    return resume;
  }
  auto found = newestValid(resume);
  if (!found) throw std::runtime_error("--resume " + resume + ": no valid checkpoint-STEP folder in it");
  return found;
}

}  // namespace taehv::train
