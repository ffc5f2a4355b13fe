#include "taehv/train/events.h"

#include <fcntl.h>
#include <png.h>
#include <turbojpeg.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "taehv/files/input_file.h"
#include "taehv/model/output_file.h"

namespace taehv::train {
namespace {

/// The largest metrics.jsonl a resume rewrites (a row is ~300 bytes: over three million steps).
constexpr uint64_t kMaxMetricsBytes = 1ull << 30;

std::array<uint32_t, 256> makeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reversed Castagnoli
    table[i] = c;
  }
  return table;
}

// Protobuf wire format, only what Event/Summary need.
void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void putTag(std::string& out, int field, int wire_type) { putVarint(out, (static_cast<uint64_t>(field) << 3) | wire_type); }
void putBytes(std::string& out, int field, const void* data, size_t size) {
  putTag(out, field, 2);
  putVarint(out, size);
  out.append(static_cast<const char*>(data), size);
}
void putBytes(std::string& out, int field, const std::string& s) { putBytes(out, field, s.data(), s.size()); }
void putDouble(std::string& out, int field, double v) {
  putTag(out, field, 1);
  char b[8];
  std::memcpy(b, &v, 8);  // little-endian host (x86-64, aarch64)
  out.append(b, 8);
}
void putFloat(std::string& out, int field, float v) {
  putTag(out, field, 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}
void putInt(std::string& out, int field, int64_t v) {
  putTag(out, field, 0);
  putVarint(out, static_cast<uint64_t>(v));
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5 (Summary).
// Summary: value = 1 (repeated Value). Value: tag = 1, simple_value = 2 (float), image = 4 (Image).
// Image: height = 1, width = 2, colorspace = 3 (3 = RGB), encoded_image_string = 4.
std::string eventWithValue(double wall_time, int64_t step, const std::string& value) {
  std::string summary;
  putBytes(summary, 1, value);
  std::string event;
  putDouble(event, 1, wall_time);
  putInt(event, 2, step);
  putBytes(event, 5, summary);
  return event;
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  static const auto table = makeCrcTable();
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t maskedCrc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string encodeFileVersionEvent(double wall_time) {
  std::string event;
  putDouble(event, 1, wall_time);
  putBytes(event, 3, std::string("brain.Event:2"));
  return event;
}

std::string encodeScalarEvent(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  putBytes(v, 1, tag);
  putFloat(v, 2, value);
  return eventWithValue(wall_time, step, v);
}

std::string encodeImageEvent(double wall_time, int64_t step, const std::string& tag, const std::vector<uint8_t>& png,
                             int width, int height) {
  std::string image;
  putInt(image, 1, height);
  putInt(image, 2, width);
  putInt(image, 3, 3);
  putBytes(image, 4, png.data(), png.size());
  std::string v;
  putBytes(v, 1, tag);
  putBytes(v, 4, image);
  return eventWithValue(wall_time, step, v);
}

TfEventsWriter::TfEventsWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now())) + "." + host;
  files::FileDescriptor fd = openForAppend(path_);  // taehv/model/output_file.h; throws OutputFileError
  file_ = ::fdopen(fd.get(), "ab");
  if (!file_) throw OutputFileError("cannot write TensorBoard event file " + path_ + ": " + std::strerror(errno));
  fd.release();  // file_ owns it now
  writeRecord(encodeFileVersionEvent(now()));
}

TfEventsWriter::~TfEventsWriter() {
  if (file_) std::fclose(file_);
}

void TfEventsWriter::writeRecord(const std::string& data) {
  // TFRecord: uint64 length, uint32 masked crc of length, data, uint32 masked crc of data (little-endian).
  const uint64_t length = data.size();
  const uint32_t length_crc = maskedCrc32c(&length, 8);
  const uint32_t data_crc = maskedCrc32c(data.data(), data.size());
  const bool ok = std::fwrite(&length, 8, 1, file_) == 1 && std::fwrite(&length_crc, 4, 1, file_) == 1 &&
                  std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
                  std::fwrite(&data_crc, 4, 1, file_) == 1 && std::fflush(file_) == 0;
  if (!ok) {
    throw OutputFileError("cannot append to TensorBoard event file " + path_ + ": " + std::strerror(errno) + " (" +
                          freeSpaceNote(std::filesystem::path(path_).parent_path().string()) + ")");
  }
}

void TfEventsWriter::scalar(const std::string& tag, int64_t step, double value) {
  writeRecord(encodeScalarEvent(now(), step, tag, static_cast<float>(value)));
}

void TfEventsWriter::image(const std::string& tag, int64_t step, const std::vector<uint8_t>& png, int width,
                           int height) {
  writeRecord(encodeImageEvent(now(), step, tag, png, width, height));
}

// ---------------------------------------------------------------------------------------------------------
std::vector<uint8_t> encodePng(const RgbImage& image) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(image.width);
  img.height = static_cast<png_uint_32>(image.height);
  img.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  if (!png_image_write_get_memory_size(img, size, 0, image.pixels.data(), 0, nullptr)) {
    throw std::runtime_error(std::string("PNG encoding failed: ") + img.message);
  }
  std::vector<uint8_t> out(size);
  if (!png_image_write_to_memory(&img, out.data(), &size, 0, image.pixels.data(), 0, nullptr)) {
    throw std::runtime_error(std::string("PNG encoding failed: ") + img.message);
  }
  out.resize(size);
  return out;
}

RgbImage decodePng(const std::vector<uint8_t>& bytes) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, bytes.data(), bytes.size())) {
    throw std::runtime_error(std::string("not a readable PNG: ") + img.message);
  }
  img.format = PNG_FORMAT_RGB;
  RgbImage out;
  out.width = static_cast<int>(img.width);
  out.height = static_cast<int>(img.height);
  out.pixels.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, out.pixels.data(), 0, nullptr)) {
    png_image_free(&img);
    throw std::runtime_error(std::string("corrupt PNG: ") + img.message);
  }
  return out;
}

RgbImage decodeJpeg(const std::vector<uint8_t>& bytes) {
  tjhandle tj = tjInitDecompress();
  if (!tj) throw std::runtime_error("libturbojpeg initialisation failed");
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
  auto* data = const_cast<unsigned char*>(bytes.data());
  const auto size = static_cast<unsigned long>(bytes.size());
  if (tjDecompressHeader3(tj, data, size, &width, &height, &subsamp, &colorspace) != 0 || width <= 0 ||
      height <= 0) {
    const std::string why = tjGetErrorStr2(tj);
    tjDestroy(tj);
    throw std::runtime_error("not a readable JPEG: " + why);
  }
  RgbImage out;
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(width) * height * 3);
  if (tjDecompress2(tj, data, size, out.pixels.data(), width, 0, height, TJPF_RGB, 0) != 0) {
    const std::string why = tjGetErrorStr2(tj);
    tjDestroy(tj);
    throw std::runtime_error("corrupt JPEG: " + why);
  }
  tjDestroy(tj);
  return out;
}

std::vector<uint8_t> readFileBytes(const std::string& path, uint64_t max_bytes) {
  const Checked<std::string> bytes = files::readInputFile(path, "", files::Role::kOther, max_bytes);
  if (!bytes.ok()) throw std::runtime_error(bytes.error);
  return std::vector<uint8_t>(bytes.value.begin(), bytes.value.end());
}

void writeFileBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  writeFileAtomically(path, [&](int fd) { return writeAllBytes(fd, bytes.data(), bytes.size()); });
}

void trimMetrics(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return;
  // The run's own file, rewritten below: not an input of the command (taehv/files/input_file.h).
  const Checked<std::string> text = files::readInputFile(path, "metrics file", files::Role::kOther, kMaxMetricsBytes);
  if (!text.ok()) throw OutputFileError(text.error);
  std::istringstream in(text.value);
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (row.is_object() && row.contains("step") && row["step"].is_number_integer() &&
        row["step"].get<int64_t>() <= step) {
      kept += line + "\n";
    }
  }
  writeFileAtomically(path, [&](int fd) { return writeAllBytes(fd, kept.data(), kept.size()); });
}

}  // namespace taehv::train
