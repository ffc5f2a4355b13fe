#include "taehv/model/safetensors.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "taehv/model/output_file.h"
#include "taehv/model/taehv.h"

namespace taehv {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; this code assumes the host is too");

std::string errnoText() { return std::strerror(errno); }

// Reads exactly `size` bytes at `offset`; false on a short read (file changed under us) or an error.
bool preadAll(int fd, void* buffer, uint64_t size, uint64_t offset) {
  auto* out = static_cast<char*>(buffer);
  while (size > 0) {
    const ssize_t n = ::pread(fd, out, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    out += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

torch::Dtype torchDtype(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32:
      return torch::kFloat;
    case SafetensorsDtype::kF16:
      return torch::kHalf;
    case SafetensorsDtype::kBF16:
      return torch::kBFloat16;
  }
  return torch::kFloat;
}

SafetensorsDtype fileDtype(torch::Dtype dtype, const std::string& path) {
  switch (dtype) {
    case torch::kFloat:
      return SafetensorsDtype::kF32;
    case torch::kHalf:
      return SafetensorsDtype::kF16;
    case torch::kBFloat16:
      return SafetensorsDtype::kBF16;
    default:
      throw SafetensorsError("writing safetensors file '" + path + "': dtype " + std::string(c10::toString(dtype)) +
                             " is not supported (use float32, float16 or bfloat16)");
  }
}

std::string shapeText(c10::IntArrayRef shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace

SafetensorsFile openSafetensors(const std::string& path, files::Role role) {
  // Its type is checked before the open (a FIFO would block it); taehv/files/input_file.h.
  Checked<files::OpenedFile> opened = files::openInputFile(path, "safetensors file", role);
  if (!opened.ok()) throw SafetensorsError(opened.error);
  SafetensorsFile out;
  out.path = path;
  out.file = std::move(opened.value);
  const files::FileDescriptor& fd = out.file.fd;
  const uint64_t file_size = out.file.size;
  // Read the length field, then (after the parser bounded it by the file size) the JSON header.
  std::vector<uint8_t> prefix(std::min<uint64_t>(file_size, 8));
  if (!preadAll(fd.get(), prefix.data(), prefix.size(), 0)) {
    throw SafetensorsError("cannot read safetensors file '" + path + "': " + errnoText());
  }
  if (file_size >= 8) {
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) {
      header_len = (header_len << 8) | prefix[static_cast<std::size_t>(i)];
    }
    if (header_len <= kSafetensorsMaxHeaderBytes && header_len <= file_size - 8) {
      prefix.resize(8 + header_len);
      if (!preadAll(fd.get(), prefix.data() + 8, header_len, 8)) {
        throw SafetensorsError("cannot read the header of safetensors file '" + path + "' (file changed while reading?)");
      }
    }
  }
  out.header = parseSafetensorsHeader(prefix.data(), prefix.size(), file_size, path);
  return out;
}

void SafetensorsFile::read(const SafetensorsEntry& entry, uint64_t offset, uint64_t size, void* out) const {
  if (offset > entry.end - entry.begin || size > entry.end - entry.begin - offset) {
    throw SafetensorsError("safetensors file '" + path + "', tensor '" + entry.name + "': bytes [" +
                           std::to_string(offset) + ", +" + std::to_string(size) + ") lie outside it");
  }
  if (!preadAll(file.fd.get(), out, size, header.data_offset + entry.begin + offset)) {
    throw SafetensorsError("safetensors file '" + path + "', tensor '" + entry.name +
                           "': short read (file truncated while reading?)");
  }
}

std::map<std::string, torch::Tensor> readSafetensors(const std::string& path, files::Role role) {
  const SafetensorsFile file = openSafetensors(path, role);
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& entry : file.header.entries) {
    // Sizes were checked against the file size, so this allocation is bounded by the file.
    torch::Tensor t = torch::empty(entry.shape, torch::TensorOptions().dtype(torchDtype(entry.dtype)));
    file.read(entry, 0, entry.end - entry.begin, t.data_ptr());
    tensors.emplace(entry.name, std::move(t));
  }
  return tensors;
}

void writeSafetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                      torch::Dtype dtype) {
  const SafetensorsDtype out_dtype = fileDtype(dtype, path);
  std::vector<SafetensorsEntry> entries;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name == "__metadata__") {
      throw SafetensorsError("writing safetensors file '" + path + "': invalid tensor name '" + name + "'");
    }
    if (!tensor.defined()) {
      throw SafetensorsError("writing safetensors file '" + path + "', tensor '" + name + "': undefined tensor");
    }
    torch::Tensor t = tensor.detach().to(torch::kCPU, dtype).contiguous();
    SafetensorsEntry e;
    e.name = name;
    e.dtype = out_dtype;
    e.shape = t.sizes().vec();
    e.begin = offset;
    e.end = offset + static_cast<uint64_t>(t.numel()) * t.element_size();
    offset = e.end;
    entries.push_back(std::move(e));
    data.push_back(std::move(t));
  }
  const std::string header = serializeSafetensorsHeader(entries);

  try {
    writeFileAtomically(path, [&](int fd) {
      if (!writeAllBytes(fd, header.data(), header.size())) return false;
      for (std::size_t i = 0; i < data.size(); ++i) {
        if (!writeAllBytes(fd, data[i].data_ptr(), static_cast<std::size_t>(entries[i].end - entries[i].begin))) {
          return false;
        }
      }
      return true;
    });
  } catch (const OutputFileError& e) {
    throw SafetensorsError(std::string("safetensors: ") + e.what());
  }
}

void loadWeights(TAEHVImpl& model, const std::string& path) {
  std::map<std::string, torch::Tensor> file = readSafetensors(path);
  auto params = model.named_parameters(/*recurse=*/true);
  std::vector<std::string> missing;
  for (const auto& item : params) {
    if (file.find(item.key()) == file.end()) {
      missing.push_back(item.key());
    }
  }
  std::vector<std::string> extra;
  for (const auto& [name, tensor] : file) {
    if (!params.contains(name)) {
      extra.push_back(name);
    }
  }
  const auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (std::size_t i = 0; i < names.size() && i < 8; ++i) {
      out += (i ? ", " : "") + names[i];
    }
    return names.size() > 8 ? out + ", ... (" + std::to_string(names.size()) + " in all)" : out;
  };
  if (!missing.empty()) {
    throw SafetensorsError("weights file '" + path + "' lacks tensor(s) " + list(missing) +
                           " that the model needs: wrong --variant for these weights?");
  }
  if (!extra.empty()) {
    throw SafetensorsError("weights file '" + path + "' has unexpected tensor(s) " + list(extra) +
                           " that the model does not have: wrong --variant for these weights?");
  }
  for (const auto& [name, tensor] : file) {
    const int64_t bad = (~torch::isfinite(tensor)).sum().item<int64_t>();
    if (bad > 0) {
      throw SafetensorsError("weights file '" + path + "', tensor '" + name + "': " + std::to_string(bad) + " of " +
                             std::to_string(tensor.numel()) + " values are NaN or infinite; these weights would turn "
                             "every output into NaN (a diverged training run?): use an earlier checkpoint");
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& item : params) {
    torch::Tensor source = file.at(item.key());
    torch::Tensor& target = item.value();
    if (source.sizes() != target.sizes() && model.isTGrowWeight(item.key()) && source.dim() == target.dim() &&
        source.size(0) > target.size(0) && source.sizes().slice(1) == target.sizes().slice(1)) {
      // Time-upscale stage switched off: keep the rows of the last time step, as upstream does.
      source = source.slice(0, source.size(0) - target.size(0));
    }
    if (source.sizes() != target.sizes()) {
      throw SafetensorsError("weights file '" + path + "', tensor '" + item.key() + "': shape " +
                             shapeText(source.sizes()) + " but the model needs " + shapeText(target.sizes()) +
                             ": wrong --variant for these weights?");
    }
    target.copy_(source.to(target.dtype()));
  }
}

void saveWeights(const TAEHVImpl& model, const std::string& path, torch::Dtype dtype) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    tensors.emplace(item.key(), item.value());
  }
  writeSafetensors(path, tensors, dtype);
}

}  // namespace taehv
