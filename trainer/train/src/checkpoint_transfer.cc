#include "checkpoint_transfer.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <vector>

#include "taehv/files/input_file.h"
#include "taehv/train/checkpoint.h"

namespace taehv::train {
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestFile = "manifest.json";

std::string readBytes(const fs::path& path) {
  const Checked<std::string> bytes = files::readInputFile(path.string(), "checkpoint file", files::Role::kOther,
                                                          std::numeric_limits<std::uint64_t>::max());
  if (!bytes.ok()) throw CheckpointError("cannot send it to a fresh node: " + bytes.error);
  return bytes.value;
}

/// The files of checkpoint folder `dir` its manifest lists, and the manifest, as one buffer: per file its name's
/// length (8 bytes), the name, its size (8 bytes) and its bytes.
std::string pack(const std::string& dir) {
  std::string why;
  if (!verifyCheckpoint(dir, &why)) throw CheckpointError("cannot send " + dir + " to a fresh node: " + why);
  const std::string manifest_text = readBytes(fs::path(dir) / kManifestFile);
  std::vector<std::string> names{kManifestFile};
  for (const auto& f : parseCheckpointManifest(manifest_text).files) names.push_back(f.name);
  std::string out;
  for (const std::string& name : names) {
    const std::string bytes = name == kManifestFile ? manifest_text : readBytes(fs::path(dir) / name);
    const uint64_t sizes[2] = {name.size(), bytes.size()};
    out.append(reinterpret_cast<const char*>(&sizes[0]), 8).append(name);
    out.append(reinterpret_cast<const char*>(&sizes[1]), 8).append(bytes);
  }
  return out;
}

/// pack()'s buffer back to name -> bytes; a malformed buffer is a CheckpointError.
std::map<std::string, std::string> unpack(const uint8_t* data, size_t size) {
  std::map<std::string, std::string> files;
  size_t at = 0;
  auto take = [&](size_t n) {
    if (n > size - at) throw CheckpointError("the checkpoint received from the other node is truncated");
    const char* p = reinterpret_cast<const char*>(data + at);
    at += n;
    return std::string(p, n);
  };
  while (at < size) {
    uint64_t n = 0;
    std::memcpy(&n, take(8).data(), 8);
    const std::string name = take(n);
    std::memcpy(&n, take(8).data(), 8);
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
      throw CheckpointError("the checkpoint received from the other node names a file '" + name + "'");
    }
    files[name] = take(n);
  }
  return files;
}

}  // namespace

std::string receiveMissingCheckpoint(Distributed& dist, int64_t step, const std::string& out_dir, bool writer) {
  if (step <= 0 || dist.worldSize() == 1) return "";
  const bool fresh = listCheckpoints(out_dir).empty();
  torch::Tensor holds = torch::zeros({dist.worldSize()}, torch::kDouble);
  holds[dist.rank()] = fresh ? 0.0 : 1.0;
  dist.allreduceSum(holds);
  int source = -1;
  bool any_fresh = false;
  for (int r = 0; r < dist.worldSize(); ++r) {
    if (holds[r].item<double>() > 0.5) {
      if (source < 0) source = r;
    } else {
      any_fresh = true;
    }
  }
  // None fresh, or none holding (then the agreement said step 0 and this is not reached): nothing to send.
  if (!any_fresh || source < 0) return "";
  const auto start = std::chrono::steady_clock::now();
  const std::string dir = (fs::path(out_dir) / ("checkpoint-" + std::to_string(step))).string();
  std::string packed;
  if (dist.rank() == source) packed = pack(dir);
  torch::Tensor size = torch::tensor({static_cast<int64_t>(packed.size())}, torch::kLong);
  dist.broadcastFrom(source, {size});
  torch::Tensor buffer = torch::empty({size.item<int64_t>()}, torch::kUInt8);
  if (dist.rank() == source) std::memcpy(buffer.data_ptr<uint8_t>(), packed.data(), packed.size());
  dist.broadcastFrom(source, {buffer});
  std::string line;
  if (fresh && writer) {
    std::map<std::string, std::string> files = unpack(buffer.data_ptr<uint8_t>(), static_cast<size_t>(buffer.numel()));
    const auto manifest = files.find(kManifestFile);
    if (manifest == files.end()) throw CheckpointError("the checkpoint received from rank " + std::to_string(source) +
                                                       " has no manifest.json");
    const CheckpointManifest sent = parseCheckpointManifest(manifest->second);
    const std::string saved = saveCheckpoint(out_dir, step, std::numeric_limits<int64_t>::max(),
                                             [&](const std::string& tmp) {
                                               for (const auto& [name, bytes] : files) {
                                                 if (name == kManifestFile) continue;
                                                 std::ofstream out(fs::path(tmp) / name, std::ios::binary);
                                                 out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
                                                 if (!out) throw std::runtime_error("cannot write " + name);
                                               }
                                             });
    const Checked<std::string> text =
        files::readInputFile((fs::path(saved) / kManifestFile).string(), "checkpoint manifest", files::Role::kOther);
    if (!text.ok()) throw CheckpointError(text.error);
    const CheckpointManifest written = parseCheckpointManifest(text.value);
    auto same = [](const CheckpointManifest& a, const CheckpointManifest& b) {
      if (a.files.size() != b.files.size()) return false;
      std::map<std::string, std::pair<uint64_t, uint32_t>> m;
      for (const auto& f : a.files) m[f.name] = {f.size, f.crc32c};
      for (const auto& f : b.files) {
        const auto it = m.find(f.name);
        if (it == m.end() || it->second != std::make_pair(f.size, f.crc32c)) return false;
      }
      return true;
    };
    if (!same(sent, written)) {
      fs::remove_all(saved);
      throw CheckpointError("the checkpoint-" + std::to_string(step) + " received from rank " + std::to_string(source) +
                            " does not match its manifest (sizes or checksums differ); nothing was kept");
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char figures[96];
    std::snprintf(figures, sizeof figures, "%.1f MB in %.2f s", static_cast<double>(buffer.numel()) / 1e6, seconds);
    line = "resume: this node held no checkpoint; received checkpoint-" + std::to_string(step) + " from rank " +
           std::to_string(source) + " over the process group (" + figures + ", checksums match) into " + saved;
  }
  dist.barrier();  // the fresh nodes' other ranks load it only once their writer saved it
  return line;
}

}  // namespace taehv::train
