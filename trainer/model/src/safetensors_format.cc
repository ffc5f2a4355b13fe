#include "taehv/model/safetensors_format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

namespace taehv {
namespace {

using Json = nlohmann::json;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw SafetensorsError("safetensors file '" + file + "': " + what);
}

[[noreturn]] void failTensor(const std::string& file, const std::string& tensor, const std::string& what) {
  throw SafetensorsError("safetensors file '" + file + "', tensor '" + tensor + "': " + what);
}

bool parseDtype(const std::string& name, SafetensorsDtype& out) {
  if (name == "F32") {
    out = SafetensorsDtype::kF32;
  } else if (name == "F16") {
    out = SafetensorsDtype::kF16;
  } else if (name == "BF16") {
    out = SafetensorsDtype::kBF16;
  } else {
    return false;
  }
  return true;
}

// Reads a non-negative JSON integer that fits in uint64_t; false for floats, negatives, strings, ...
bool readUnsigned(const Json& value, uint64_t& out) {
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer()) {
    const int64_t v = value.get<int64_t>();
    if (v < 0) {
      return false;
    }
    out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

std::string printable(const std::string& s) {
  std::string out;
  for (const char c : s.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(c);
    out += (u >= 0x20 && u < 0x7f) ? c : '?';
  }
  return s.size() > 80 ? out + "..." : out;
}

// A shape as its entries for messages, "[2, 2]" or "[2, array, -1]", at most about 80 characters. Only the top
// level: never recurses into (or dumps) what a hostile header nests inside it.
std::string shapeText(const Json& shape) {
  std::string out = "[";
  for (const auto& dim : shape) {
    if (out.size() > 80) {
      return out + ", ...]";
    }
    out += (out.size() > 1 ? ", " : "") + (dim.is_number() ? dim.dump() : std::string(dim.type_name()));
  }
  return out + "]";
}

SafetensorsEntry parseEntry(const std::string& file, const std::string& name, const Json& spec,
                            uint64_t data_size) {
  SafetensorsEntry entry;
  entry.name = name;
  if (!spec.is_object()) {
    failTensor(file, name, "header entry is not an object with dtype, shape and data_offsets");
  }
  for (const auto& item : spec.items()) {
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets") {
      failTensor(file, name, "unknown header field '" + printable(item.key()) + "'");
    }
  }
  const auto dtype = spec.find("dtype");
  if (dtype == spec.end() || !dtype->is_string()) {
    failTensor(file, name, "missing or non-string \"dtype\"");
  }
  if (!parseDtype(dtype->get<std::string>(), entry.dtype)) {
    failTensor(file, name,
               "unsupported dtype '" + printable(dtype->get<std::string>()) + "' (supported: F32, F16, BF16)");
  }
  const auto shape = spec.find("shape");
  if (shape == spec.end() || !shape->is_array()) {
    failTensor(file, name, "missing or non-array \"shape\"");
  }
  if (shape->size() > 16) {
    failTensor(file, name, "shape has " + std::to_string(shape->size()) + " dimensions (at most 16 supported)");
  }
  // numel x element size must equal the byte range; compute it without overflow.
  uint64_t bytes = safetensorsDtypeSize(entry.dtype);
  bool overflow = false;
  for (const auto& dim : *shape) {
    uint64_t d = 0;
    if (!readUnsigned(dim, d) || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      failTensor(file, name, "shape " + shapeText(*shape) + " has an entry that is not a non-negative integer");
    }
    entry.shape.push_back(static_cast<int64_t>(d));
    if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / d) {
      overflow = true;
    }
    bytes = overflow ? 0 : bytes * d;
  }
  const auto offsets = spec.find("data_offsets");
  if (offsets == spec.end() || !offsets->is_array() || offsets->size() != 2 ||
      !readUnsigned((*offsets)[0], entry.begin) || !readUnsigned((*offsets)[1], entry.end)) {
    failTensor(file, name, "\"data_offsets\" must be two non-negative integers [begin, end]");
  }
  if (entry.begin > entry.end) {
    failTensor(file, name,
               "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) + "] end before they begin");
  }
  if (entry.end > data_size) {
    failTensor(file, name,
               "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                   "] reach past the end of the data (" + std::to_string(data_size) +
                   " bytes): the file is truncated or the header is wrong");
  }
  if (overflow || bytes != entry.end - entry.begin) {
    failTensor(file, name,
               "shape " + shapeText(*shape) + " with dtype " + safetensorsDtypeName(entry.dtype) + " needs " +
                   (overflow ? std::string("more than 2^64") : std::to_string(bytes)) + " bytes but data_offsets span " +
                   std::to_string(entry.end - entry.begin));
  }
  return entry;
}

}  // namespace

const char* safetensorsDtypeName(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32:
      return "F32";
    case SafetensorsDtype::kF16:
      return "F16";
    case SafetensorsDtype::kBF16:
      return "BF16";
  }
  return "?";
}

std::size_t safetensorsDtypeSize(SafetensorsDtype dtype) { return dtype == SafetensorsDtype::kF32 ? 4 : 2; }

SafetensorsHeader parseSafetensorsHeader(const uint8_t* prefix, std::size_t prefix_size, uint64_t file_size,
                                         const std::string& file) {
  if (prefix_size > file_size) {
    fail(file, "internal error: prefix larger than the file");
  }
  if (file_size < 8) {
    fail(file, "only " + std::to_string(file_size) + " bytes: too short to hold the 8-byte header length (truncated?)");
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | prefix[i];
  }
  if (header_len > kSafetensorsMaxHeaderBytes) {
    fail(file, "header length field says " + std::to_string(header_len) + " bytes (limit " +
                   std::to_string(kSafetensorsMaxHeaderBytes) + "): not a safetensors file, or corrupted");
  }
  if (header_len > file_size - 8) {
    fail(file, "header length field says " + std::to_string(header_len) + " bytes but the file has only " +
                   std::to_string(file_size - 8) + " after it: truncated or not a safetensors file");
  }
  if (8 + header_len > prefix_size) {
    fail(file, "internal error: header not fully read");
  }
  SafetensorsHeader header;
  header.data_offset = 8 + header_len;
  header.data_size = file_size - header.data_offset;

  // Duplicate top-level names would silently shadow each other in a JSON object: reject them.
  std::set<std::string> seen;
  std::string duplicate;
  // nlohmann's parser keeps its own stack on the heap, but copying, comparing and dumping a value recurse: a
  // container deeper than kSafetensorsMaxJsonDepth is discarded as it starts (nothing inside it is built).
  bool too_deep = false;
  const auto check_structure = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
        depth >= kSafetensorsMaxJsonDepth) {
      too_deep = true;
      return false;
    }
    if (depth == 1 && event == Json::parse_event_t::key && duplicate.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second) {
        duplicate = key;
      }
    }
    return true;
  };
  const auto* json_begin = reinterpret_cast<const char*>(prefix + 8);
  Json root = Json::parse(json_begin, json_begin + header_len, check_structure, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    fail(file, "header is not valid JSON (corrupted or not a safetensors file)");
  }
  if (too_deep) {
    fail(file, "header nests JSON arrays or objects more than " + std::to_string(kSafetensorsMaxJsonDepth) +
                   " deep (a safetensors header needs 3): corrupted or not a safetensors file");
  }
  if (!duplicate.empty()) {
    failTensor(file, printable(duplicate), "appears twice in the header");
  }
  if (!root.is_object()) {
    fail(file, "header JSON is not an object");
  }
  for (const auto& item : root.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) {
        fail(file, "__metadata__ is not an object of strings");
      }
      for (const auto& meta : item.value().items()) {
        if (!meta.value().is_string()) {
          fail(file, "__metadata__ value for '" + printable(meta.key()) + "' is not a string");
        }
        header.metadata[meta.key()] = meta.value().get<std::string>();
      }
      continue;
    }
    header.entries.push_back(parseEntry(file, item.key(), item.value(), header.data_size));
  }

  // No two non-empty byte ranges may overlap.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : header.entries) {
    if (e.end > e.begin) {
      by_offset.push_back(&e);
    }
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return a->begin < b->begin; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      failTensor(file, printable(by_offset[i]->name),
                 "data_offsets overlap those of tensor '" + printable(by_offset[i - 1]->name) + "'");
    }
  }
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.name < b.name; });
  return header;
}

std::string serializeSafetensorsHeader(const std::vector<SafetensorsEntry>& entries,
                                       const std::map<std::string, std::string>& metadata) {
  Json root = Json::object();
  if (!metadata.empty()) {
    root["__metadata__"] = metadata;
  }
  for (const auto& e : entries) {
    root[e.name] = {{"dtype", safetensorsDtypeName(e.dtype)}, {"shape", e.shape}, {"data_offsets", {e.begin, e.end}}};
  }
  std::string json = root.dump();
  while ((8 + json.size()) % 8 != 0) {
    json.push_back(' ');
  }
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  return out + json;
}

}  // namespace taehv
