// Event files are parsed back here with a decoder written independently of the writer (protobuf wire format
// by hand), checking the TFRecord framing and both masked CRCs as TensorBoard's reader does.
#include "taehv/train/events.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "taehv/model/output_file.h"

namespace taehv::train {
namespace {

TEST(Crc32c, KnownVector) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
}

struct Field {
  int number;
  int wire;
  uint64_t varint = 0;
  std::string bytes;
};

std::vector<Field> parseMessage(const std::string& m) {
  std::vector<Field> out;
  size_t i = 0;
  auto varint = [&]() {
    uint64_t v = 0;
    int shift = 0;
    while (true) {
      if (i >= m.size()) throw std::runtime_error("truncated varint");
      const uint8_t b = static_cast<uint8_t>(m[i++]);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
      shift += 7;
    }
    return v;
  };
  while (i < m.size()) {
    const uint64_t key = varint();
    Field f{static_cast<int>(key >> 3), static_cast<int>(key & 7), 0, {}};
    if (f.wire == 0) {
      f.varint = varint();
    } else if (f.wire == 1) {
      f.bytes = m.substr(i, 8);
      i += 8;
    } else if (f.wire == 5) {
      f.bytes = m.substr(i, 4);
      i += 4;
    } else if (f.wire == 2) {
      const auto n = varint();
      f.bytes = m.substr(i, n);
      i += n;
    } else {
      throw std::runtime_error("bad wire type");
    }
    if (i > m.size()) throw std::runtime_error("truncated field");
    out.push_back(f);
  }
  return out;
}

const Field& field(const std::vector<Field>& fs, int number) {
  for (const auto& f : fs) {
    if (f.number == number) return f;
  }
  throw std::runtime_error("protobuf field " + std::to_string(number) + " missing");
}

std::vector<std::string> readRecords(const std::string& path) {
  const auto bytes = readFileBytes(path);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < bytes.size()) {
    uint64_t len;
    uint32_t len_crc, data_crc;
    EXPECT_LE(i + 12, bytes.size());
    std::memcpy(&len, &bytes[i], 8);
    std::memcpy(&len_crc, &bytes[i + 8], 4);
    uint32_t c = crc32c(&bytes[i], 8);
    EXPECT_EQ(len_crc, ((c >> 15) | (c << 17)) + 0xa282ead8u);
    std::string data(reinterpret_cast<const char*>(&bytes[i + 12]), len);
    std::memcpy(&data_crc, &bytes[i + 12 + len], 4);
    c = crc32c(data.data(), data.size());
    EXPECT_EQ(data_crc, ((c >> 15) | (c << 17)) + 0xa282ead8u);
    out.push_back(data);
    i += 12 + len + 4;
  }
  EXPECT_EQ(i, bytes.size());
  return out;
}

TEST(TfEvents, WrittenFileParsesBackAsTensorBoardEvents) {
  char tmpl[] = "/tmp/taehv-events-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::string path;
  RgbImage img{4, 2, std::vector<uint8_t>(4 * 2 * 3, 200)};
  img.pixels[0] = 7;
  const auto png = encodePng(img);
  {
    TfEventsWriter w(dir + "/tb");
    w.scalar("train/loss", 5, 0.25);
    w.image("preview", 6, png, 4, 2);
    path = w.path();
  }
  const auto records = readRecords(path);
  ASSERT_EQ(records.size(), 3u);
  // 1: file_version.
  auto e0 = parseMessage(records[0]);
  EXPECT_EQ(field(e0, 3).bytes, "brain.Event:2");
  EXPECT_EQ(field(e0, 1).wire, 1);
  // 2: scalar.
  auto e1 = parseMessage(records[1]);
  EXPECT_EQ(field(e1, 2).varint, 5u);
  auto summary = parseMessage(field(e1, 5).bytes);
  auto value = parseMessage(field(summary, 1).bytes);
  EXPECT_EQ(field(value, 1).bytes, "train/loss");
  float f;
  std::memcpy(&f, field(value, 2).bytes.data(), 4);
  EXPECT_FLOAT_EQ(f, 0.25f);
  // 3: image, whose PNG decodes to what was written.
  auto e2 = parseMessage(records[2]);
  EXPECT_EQ(field(e2, 2).varint, 6u);
  auto v2 = parseMessage(field(parseMessage(field(e2, 5).bytes), 1).bytes);
  EXPECT_EQ(field(v2, 1).bytes, "preview");
  auto image = parseMessage(field(v2, 4).bytes);
  EXPECT_EQ(field(image, 1).varint, 2u);
  EXPECT_EQ(field(image, 2).varint, 4u);
  const std::string& enc = field(image, 4).bytes;
  const auto decoded = decodePng(std::vector<uint8_t>(enc.begin(), enc.end()));
  EXPECT_EQ(decoded.width, 4);
  EXPECT_EQ(decoded.height, 2);
  EXPECT_EQ(decoded.pixels, img.pixels);
  std::filesystem::remove_all(dir);
}

TEST(Images, CorruptPngAndJpegAreErrorsNotCrashes) {
  std::vector<uint8_t> junk(100, 0x42);
  EXPECT_THROW(decodePng(junk), std::runtime_error);
  EXPECT_THROW(decodeJpeg(junk), std::runtime_error);
  auto png = encodePng(RgbImage{8, 8, std::vector<uint8_t>(8 * 8 * 3, 1)});
  png.resize(png.size() / 2);
  EXPECT_THROW(decodePng(png), std::runtime_error);
}


std::string tempFolder() {
  char tmpl[] = "/tmp/taehv-out-XXXXXX";
  return mkdtemp(tmpl);
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A write never replaces what is not a regular file: a character device (made here with mknod, as /dev/null is,
// so that a regression cannot destroy the machine's own /dev/null), a FIFO, a folder, nor one behind a link.
TEST(HostileOutputs, DevicesFifosAndFoldersAreRefusedAndLeftAsTheyWere) {
  const auto dir = tempFolder();
  const std::string null_dev = dir + "/null";
  const bool have_device = ::mknod(null_dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;  // needs root
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  std::filesystem::create_directories(dir + "/folder");
  std::filesystem::create_symlink(dir + "/fifo", dir + "/link-to-fifo");
  std::vector<std::pair<std::string, std::string>> cases = {
      {dir + "/fifo", "a FIFO"}, {dir + "/folder", "a folder"}, {dir + "/link-to-fifo", "a FIFO"}};
  if (have_device) cases.emplace_back(null_dev, "a character device");
  for (const auto& [path, kind] : cases) {
    try {
      writeFileBytes(path, {1, 2, 3});
      ADD_FAILURE() << path << " was written over";
    } catch (const OutputFileError& e) {
      EXPECT_NE(std::string(e.what()).find(kind), std::string::npos) << e.what();
    }
  }
  struct stat st{};
  if (have_device) {
    ASSERT_EQ(::lstat(null_dev.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced";
  }
  ASSERT_EQ(::lstat((dir + "/fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::lstat((dir + "/link-to-fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << "temporary left: " << e.path();
  }
  std::filesystem::remove_all(dir);
}

TEST(HostileOutputs, ALinkIsWrittenThroughAndStaysALink) {
  const auto dir = tempFolder();
  { std::ofstream(dir + "/real.bin") << "old"; }
  std::filesystem::create_symlink("real.bin", dir + "/rel-link");       // relative, as `ln -s real.bin` makes
  std::filesystem::create_symlink(dir + "/rel-link", dir + "/chain");   // a link to a link
  std::filesystem::create_symlink(dir + "/new.bin", dir + "/dangling");  // its target does not exist yet
  writeFileBytes(dir + "/chain", {'n', 'e', 'w'});
  EXPECT_EQ(slurp(dir + "/real.bin"), "new");
  EXPECT_TRUE(std::filesystem::is_symlink(dir + "/chain"));
  EXPECT_TRUE(std::filesystem::is_symlink(dir + "/rel-link"));
  writeFileBytes(dir + "/dangling", {'x'});
  EXPECT_EQ(slurp(dir + "/new.bin"), "x");
  EXPECT_TRUE(std::filesystem::is_symlink(dir + "/dangling"));
  std::filesystem::create_symlink("loop-b", dir + "/loop-a");
  std::filesystem::create_symlink("loop-a", dir + "/loop-b");
  EXPECT_THROW(writeFileBytes(dir + "/loop-a", {'x'}), OutputFileError);
  std::filesystem::remove_all(dir);
}

TEST(HostileOutputs, AResumedRunsMetricsKeepNoStepTwice) {
  const auto dir = tempFolder();
  const std::string path = dir + "/metrics.jsonl";
  { std::ofstream(path) << "{\"step\": 10}\n{\"step\": 20}\n{\"step\": 30}\n{\"step\": 4"; }  // cut by a kill
  trimMetrics(path, 20);
  EXPECT_EQ(slurp(path), "{\"step\": 10}\n{\"step\": 20}\n");
  trimMetrics(dir + "/absent.jsonl", 5);
  EXPECT_FALSE(std::filesystem::exists(dir + "/absent.jsonl"));
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace taehv::train
