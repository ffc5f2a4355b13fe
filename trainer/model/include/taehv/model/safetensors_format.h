// The safetensors container format without libtorch: header parsing and validation, so the parser can be
// fuzzed on its own. Layout: 8-byte little-endian header length n, n bytes of JSON
// {"name": {"dtype": "F16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}, then the data
// buffer; offsets are relative to the start of the data buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace taehv {

/// A malformed or unreadable safetensors file, or tensors that do not fit a model. The message names the file
/// and, where known, the tensor, and says what was expected.
struct SafetensorsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Element types this project reads and writes.
enum class SafetensorsDtype { kF32, kF16, kBF16 };

/// "F32", "F16", "BF16".
const char* safetensorsDtypeName(SafetensorsDtype dtype);
/// Bytes per element: 4 or 2.
std::size_t safetensorsDtypeSize(SafetensorsDtype dtype);

/// One tensor as described by the header; begin/end are byte offsets into the data buffer.
struct SafetensorsEntry {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

/// A validated header: every entry lies inside the data buffer, entries do not overlap, byte sizes match
/// shape x dtype, names are unique.
struct SafetensorsHeader {
  uint64_t data_offset = 0;  ///< file offset of the data buffer: 8 + header length
  uint64_t data_size = 0;    ///< bytes in the data buffer (file size - data_offset)
  std::vector<SafetensorsEntry> entries;  ///< sorted by name
  std::map<std::string, std::string> metadata;
};

/// Largest header accepted (the reference implementation's limit), in bytes.
constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;
/// Deepest nesting of JSON arrays and objects a header may have (a valid one has 3: the header object, a tensor's
/// object, its shape or data_offsets array). Deeper input is refused while it is parsed, before anything recurses
/// over it (building a message from a shape nested 500,000 deep once overflowed the stack).
constexpr int kSafetensorsMaxJsonDepth = 16;

/// Parses and validates the header of a safetensors file of `file_size` bytes whose first `prefix_size` bytes
/// are `prefix` (at least the 8 length bytes plus the JSON header, or the whole file). `file` is only used in
/// messages. Throws SafetensorsError; never reads past prefix + prefix_size.
SafetensorsHeader parseSafetensorsHeader(const uint8_t* prefix, std::size_t prefix_size, uint64_t file_size,
                                         const std::string& file);

/// Serialises a header for `entries` (given in data-buffer order, offsets already assigned), padded with
/// spaces so that the data buffer starts at a multiple of 8. Returns the 8 length bytes plus the JSON.
std::string serializeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                       const std::map<std::string, std::string>& metadata = {});

}  // namespace taehv
