// What users see besides the log line: TensorBoard event files (written by hand: TFRecord framing with
// masked CRC32C around a minimal hand-encoded tensorflow.Event protobuf), PNG encoding, metrics.jsonl.
// No libtorch here.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace taehv::train {

/// readFileBytes' bound: a data set's image (a 16384 x 16384 RGB PNG stored uncompressed is 768 MiB).
inline constexpr uint64_t kMaxImageFileBytes = 1ull << 30;

/// CRC-32C (Castagnoli), as TFRecord uses it. crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
/// TFRecord's masked CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t maskedCrc32c(const void* data, size_t size);

/// An 8-bit RGB image, rows top to bottom, pixels interleaved RGB.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  ///< width * height * 3
};

/// PNG file bytes of `image` (libpng). Throws std::runtime_error.
std::vector<uint8_t> encodePng(const RgbImage& image);
/// Decodes PNG bytes to RGB (libpng; gray/alpha/16-bit converted). Throws std::runtime_error.
RgbImage decodePng(const std::vector<uint8_t>& bytes);
/// Decodes JPEG bytes to RGB (libturbojpeg). Throws std::runtime_error.
RgbImage decodeJpeg(const std::vector<uint8_t>& bytes);
/// Whole file as bytes, a regular file of at most `max_bytes` (taehv/files/input_file.h: a FIFO or device is
/// refused before it is opened). Throws std::runtime_error naming the file.
std::vector<uint8_t> readFileBytes(const std::string& path, uint64_t max_bytes = kMaxImageFileBytes);
/// Writes bytes to path atomically (taehv/model/output_file.h: never over a device, FIFO or folder). Throws
/// OutputFileError naming the file and its folder's free space.
void writeFileBytes(const std::string& path, const std::vector<uint8_t>& bytes);
/// Keeps the rows of metrics.jsonl at `path` whose "step" is at most `step` (a resumed run logs the later steps
/// again); rows that are not JSON objects with a step (a line cut by a kill) go too. No file: nothing to do.
void trimMetrics(const std::string& path, int64_t step);

/// One TensorBoard event file: events.out.tfevents.<seconds>.<host> in `dir`, which TensorBoard reads.
/// Each record is flushed when written, so a killed run keeps what it logged.
class TfEventsWriter {
 public:
  /// Creates `dir` if needed and writes the file_version record. Throws std::runtime_error.
  explicit TfEventsWriter(const std::string& dir);
  ~TfEventsWriter();
  TfEventsWriter(const TfEventsWriter&) = delete;
  TfEventsWriter& operator=(const TfEventsWriter&) = delete;

  void scalar(const std::string& tag, int64_t step, double value);
  /// `png` is an encoded PNG of width x height.
  void image(const std::string& tag, int64_t step, const std::vector<uint8_t>& png, int width, int height);
  const std::string& path() const { return path_; }

 private:
  void writeRecord(const std::string& event_bytes);
  std::string path_;
  FILE* file_ = nullptr;
};

/// Encodes one tensorflow.Event (wall_time, step, and either file_version or a one-value Summary).
/// Exposed for tests that parse it back.
std::string encodeScalarEvent(double wall_time, int64_t step, const std::string& tag, float value);
std::string encodeImageEvent(double wall_time, int64_t step, const std::string& tag, const std::vector<uint8_t>& png,
                             int width, int height);
std::string encodeFileVersionEvent(double wall_time);

}  // namespace taehv::train
