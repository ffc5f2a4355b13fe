// safetensors: round trips in each dtype, the layout upstream's loader requires, weights save/load with the
// TGrow patch, and every kind of malformed file giving SafetensorsError that names the file and the tensor.
#include "taehv/model/safetensors.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "taehv/model/taehv.h"
#include "infra/built_programs.h"
#include "test_util.h"

namespace taehv {
namespace {

using testing::TempDir;

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

void writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A file with the given JSON header and `data_bytes` bytes of data.
std::string rawFile(const std::string& json, std::size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  }
  return out + json + std::string(data_bytes, '\x01');
}

// Expects readSafetensors(path) to throw SafetensorsError whose message contains each of `parts`.
void expectRejected(const std::string& path, const std::vector<std::string>& parts) {
  try {
    readSafetensors(path);
    ADD_FAILURE() << "accepted " << path;
  } catch (const SafetensorsError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

class SafetensorsDtypeTest : public ::testing::TestWithParam<torch::Dtype> {};

TEST_P(SafetensorsDtypeTest, RoundTripKeepsValuesShapesAndNames) {
  const torch::Dtype dtype = GetParam();
  TempDir dir;
  torch::manual_seed(0);
  std::map<std::string, torch::Tensor> tensors = {
      {"a.weight", torch::randn({4, 3, 3, 3})},
      {"b", torch::randn({7}) * 1000},
      {"scalar", torch::tensor(3.5f).reshape({})},
      {"empty", torch::zeros({0, 5})},
      {"transposed", torch::randn({3, 5}).t()},  // non-contiguous input is written contiguously
  };
  const std::string path = dir.file("t.safetensors");
  writeSafetensors(path, tensors, dtype);
  const auto back = readSafetensors(path);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const torch::Tensor& r = back.at(name);
    EXPECT_EQ(r.dtype(), dtype) << name;
    EXPECT_EQ(r.sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(r, t.to(dtype))) << name;
  }

  // The layout upstream's Python loader (safetensors) insists on: 8-byte aligned data start, data_offsets
  // contiguous from 0 in file order, covering the data buffer exactly.
  const std::string bytes = readBytes(path);
  const SafetensorsHeader h = parseSafetensorsHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                                     bytes.size(), path);
  EXPECT_EQ(h.data_offset % 8, 0u);
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& e : h.entries) {
    ranges.emplace_back(e.begin, e.end);
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t expect = 0;
  for (const auto& [b, e] : ranges) {
    EXPECT_EQ(b, expect);
    expect = e;
  }
  EXPECT_EQ(expect, h.data_size);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SafetensorsDtypeTest, ::testing::Values(torch::kFloat, torch::kHalf, torch::kBFloat16),
                         [](const auto& p) { return std::string(c10::toString(p.param)); });

TEST(SafetensorsTest, ReadsTheOfficialF16Checkpoint) {
  const auto tensors = readSafetensors(testing::referenceDir() + "/taehv.f16.safetensors");
  EXPECT_EQ(tensors.size(), 128u);
  EXPECT_EQ(tensors.at("decoder.22.weight").dtype(), torch::kHalf);
  EXPECT_EQ(tensors.at("decoder.22.weight").sizes(), (std::vector<int64_t>{3, 64, 3, 3}));
}

TEST(SafetensorsTest, SaveWeightsThenLoadWeightsRestoresEveryParameter) {
  testing::useTestThreads();
  TempDir dir;
  torch::manual_seed(4);
  TAEHV a(TAEHVOptions::forVariant("taew2_2"));
  TAEHV b(TAEHVOptions::forVariant("taew2_2"));
  for (const torch::Dtype dtype : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
    const std::string path = dir.file("w.safetensors");
    saveWeights(*a, path, dtype);
    loadWeights(*b, path);
    auto pb = b->named_parameters();
    for (const auto& item : a->named_parameters()) {
      EXPECT_TRUE(torch::equal(pb[item.key()], item.value().detach().to(dtype).to(torch::kFloat)))
          << item.key() << " " << c10::toString(dtype);
    }
  }
  EXPECT_EQ(readSafetensors(dir.file("w.safetensors")).size(), 128u);
}

TEST(SafetensorsTest, LoadingIntoAPreviewModelKeepsTheLastTGrowRows) {
  TempDir dir;
  torch::manual_seed(5);
  TAEHV full;
  const std::string path = dir.file("full.safetensors");
  saveWeights(*full, path, torch::kFloat);
  TAEHVOptions o;
  o.decoder_time_upscale = {false, false, true};
  TAEHV preview(o);
  loadWeights(*preview, path);
  const torch::Tensor full13 = full->named_parameters()["decoder.13.conv.weight"];  // 256 x 128
  const torch::Tensor prev13 = preview->named_parameters()["decoder.13.conv.weight"];  // 128 x 128
  ASSERT_EQ(prev13.size(0), 128);
  EXPECT_TRUE(torch::equal(prev13, full13.slice(0, 128, 256)));
  EXPECT_TRUE(torch::equal(preview->named_parameters()["decoder.19.conv.weight"],
                           full->named_parameters()["decoder.19.conv.weight"]));
}

TEST(SafetensorsTest, LoadWeightsNamesMissingExtraAndMisshapedTensors) {
  TempDir dir;
  TAEHV model;
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model->named_parameters()) {
    tensors.emplace(item.key(), item.value().detach());
  }
  const auto expect_load_error = [&](const std::map<std::string, torch::Tensor>& t, const std::string& needle) {
    const std::string path = dir.file("bad.safetensors");
    writeSafetensors(path, t);
    try {
      loadWeights(*model, path);
      ADD_FAILURE() << "loaded weights lacking/with " << needle;
    } catch (const SafetensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  auto missing = tensors;
  missing.erase("decoder.9.conv.2.bias");
  expect_load_error(missing, "decoder.9.conv.2.bias");
  auto extra = tensors;
  extra["decoder.23.weight"] = torch::zeros({3});
  expect_load_error(extra, "decoder.23.weight");
  auto wrong = tensors;
  wrong["encoder.17.weight"] = torch::zeros({48, 64, 3, 3});
  expect_load_error(wrong, "encoder.17.weight");
  auto wrong_tgrow = tensors;  // a TGrow with fewer rows than the model's cannot be patched
  wrong_tgrow["decoder.13.conv.weight"] = torch::zeros({64, 128, 1, 1});
  expect_load_error(wrong_tgrow, "decoder.13.conv.weight");
  // The other variants' official weights do not fit the default model.
  expect_load_error(readSafetensors(testing::referenceDir() + "/taew2_2.f16.safetensors"), "encoder.0.weight");
}

TEST(SafetensorsTest, MalformedFilesAreRejectedWithTheFileAndTensorNamed) {
  TempDir dir;
  const std::string ok_json =
      R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"F16","shape":[4],"data_offsets":[16,24]}})";
  const std::string good = rawFile(ok_json, 24);
  const std::string path = dir.file("bad.safetensors");
  writeBytes(path, good);
  EXPECT_EQ(readSafetensors(path).size(), 2u);  // the base case is valid

  writeBytes(path, good.substr(0, 5));
  expectRejected(path, {"too short"});
  writeBytes(path, good.substr(0, 30));  // cut inside the header
  expectRejected(path, {"header length"});
  writeBytes(path, good.substr(0, good.size() - 3));  // cut inside the data
  expectRejected(path, {"'b'", "truncated"});
  writeBytes(path, "");
  expectRejected(path, {"too short"});

  std::string lying = good;  // header length claims 2^62 bytes
  lying[7] = 0x40;
  writeBytes(path, lying);
  expectRejected(path, {"header length"});
  lying = good;  // header length one byte short: JSON cut
  lying[0] = static_cast<char>(lying[0] - 1);
  writeBytes(path, lying);
  expectRejected(path, {"JSON"});

  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16000]}})", 16));
  expectRejected(path, {"'a'", "past the end"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[16,0]}})", 16));
  expectRejected(path, {"'a'", "end before"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                           16));
  expectRejected(path, {"overlap"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", 16));
  expectRejected(path, {"'a'", "unsupported dtype 'F64'"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", 16));
  expectRejected(path, {"'a'", "24 bytes"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]}})", 16));
  expectRejected(path, {"'a'", "non-negative"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,16]}})", 16));
  expectRejected(path, {"'a'", "2^64"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                           R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                           16));
  expectRejected(path, {"'a'", "twice"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[4]}})", 16));
  expectRejected(path, {"'a'", "data_offsets"});
  writeBytes(path, rawFile(R"([1,2,3])", 16));
  expectRejected(path, {"not an object"});
  writeBytes(path, rawFile("\xff\xfe{}", 16));
  expectRejected(path, {"JSON"});
  expectRejected(dir.file("does-not-exist.safetensors"), {"cannot read it"});
}

// Issue 38 (1): a 1 MB header whose shape nests arrays 500,000 deep overflowed the stack (SIGSEGV) while the
// message about it was built. Nesting beyond kSafetensorsMaxJsonDepth is refused as it is parsed, wherever it is;
// a shallow wrong shape is named by its top-level entries.
TEST(HostileSafetensors, DeeplyNestedJsonIsRefusedWithoutRecursing) {
  TempDir dir;
  const std::string path = dir.file("nested.safetensors");
  const std::size_t depth = 500'000;
  const std::string nested = std::string(depth, '[') + "1" + std::string(depth, ']');
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":)" + nested + R"(,"data_offsets":[0,4]}})", 4));
  expectRejected(path, {"nests JSON arrays or objects more than 16 deep"});
  writeBytes(path, rawFile(R"({"__metadata__":{"k":)" + nested + "}}", 0));
  expectRejected(path, {"more than 16 deep"});
  std::string objects;  // {"a":{"a":...{}...}}
  for (std::size_t i = 0; i < depth / 4; ++i) objects += R"({"a":)";
  objects += "{}" + std::string(depth / 4, '}');
  writeBytes(path, rawFile(objects, 0));
  expectRejected(path, {"more than 16 deep"});
  writeBytes(path, rawFile(std::string(depth, '['), 0));  // never closed: not JSON
  expectRejected(path, {"not valid JSON"});
  // Within the bound: the usual message, the shape shown by its top level.
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[2,[[[1]]],"x"],"data_offsets":[0,4]}})", 4));
  expectRejected(path, {"'a'", "shape [2, array, string] has an entry that is not a non-negative integer"});
  writeBytes(path, rawFile(R"({"a":{"dtype":"F32","shape":[)" + std::string(12, '[') + std::string(12, ']') +
                               R"(],"data_offsets":[0,4]}})",
                           4));
  expectRejected(path, {"'a'", "shape [array]"});
}

}  // namespace
}  // namespace taehv

namespace taehv {
namespace {

// Replays the libFuzzer corpus (tests/trainer/model/fuzz_corpus, grown by taehv_safetensors_fuzz) through the
// parser in this ordinary build: every file is either accepted with in-bounds entries or rejected cleanly.
TEST(SafetensorsTest, FuzzCorpusParsesOrIsRejectedCleanly) {
  const char* source = std::getenv("TAEHV_SOURCE_DIR");
  const std::filesystem::path corpus =
      std::filesystem::path(source ? std::string(source) : ::taehv::testing::besideThisTest(TAEHV_SOURCE_DIR_FALLBACK)) / "tests/trainer/model/fuzz_corpus";
  ASSERT_TRUE(std::filesystem::is_directory(corpus)) << corpus;
  int accepted = 0;
  int rejected = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus)) {
    const std::string bytes = readBytes(entry.path().string());
    try {
      const SafetensorsHeader h = parseSafetensorsHeader(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(),
                                                         bytes.size(), entry.path().string());
      for (const auto& e : h.entries) {
        EXPECT_LE(h.data_offset + e.end, bytes.size()) << entry.path();
      }
      ++accepted;
    } catch (const SafetensorsError& e) {
      EXPECT_NE(std::string(e.what()).find(entry.path().string()), std::string::npos) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace taehv
