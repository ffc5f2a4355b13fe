#include "taehv/model/variants.h"

#include "taehv/suggest.h"

namespace taehv {

int64_t VariantSpec::clipFrameMultiple() const {
  if (time_layout == TimeLayout::kH3) {
    return 17;
  }
  int64_t s = 1;
  for (const bool on : encoder_time_downscale) {
    s *= on ? 2 : 1;
  }
  return s;
}

const std::vector<VariantSpec>& variantSpecs() {
  // ARCHITECTURE.md ("Variants added upstream in 2026") and upstream's TAEHV.__init__ file-name rules.
  constexpr std::array<bool, 3> kEnc{true, true, false};
  constexpr std::array<bool, 3> kDec{false, true, true};
  constexpr std::array<bool, 3> kAll{true, true, true};
  static const std::vector<VariantSpec> specs = {
      {"taehv", 1, 16, kEnc, kDec, DecoderArch::kBase, TimeLayout::kPlain},
      {"taew2_1", 1, 16, kEnc, kDec, DecoderArch::kBase, TimeLayout::kPlain},
      {"taecvx", 1, 16, kEnc, kDec, DecoderArch::kBase, TimeLayout::kCogVideoX},
      {"taeos1_3", 1, 16, kEnc, kDec, DecoderArch::kBase, TimeLayout::kPlain},
      {"taehv1_5", 2, 32, kEnc, kDec, DecoderArch::kBase, TimeLayout::kPlain},
      {"taew2_2", 2, 48, kEnc, kDec, DecoderArch::kBase, TimeLayout::kPlain},
      {"taehv1_5_super", 2, 32, kEnc, kDec, DecoderArch::kSuper, TimeLayout::kPlain},
      {"taew2_2_super", 2, 48, kEnc, kDec, DecoderArch::kSuper, TimeLayout::kPlain},
      {"taeltx_2", 4, 128, kAll, kAll, DecoderArch::kBase, TimeLayout::kPlain},
      {"taeltx2_3", 4, 128, kAll, kAll, DecoderArch::kBase, TimeLayout::kPlain},
      {"taeh3", 2, 24, kEnc, kDec, DecoderArch::kBase, TimeLayout::kH3},
  };
  return specs;
}

const VariantSpec* findVariant(const std::string& name) {
  for (const auto& spec : variantSpecs()) {
    if (spec.name == name) {
      return &spec;
    }
  }
  return nullptr;
}

std::string variantList() {
  std::string out;
  for (const auto& spec : variantSpecs()) {
    out += (out.empty() ? "" : ", ") + spec.name;
  }
  return out;
}

std::string unknownVariantMessage(const std::string& name) {
  std::vector<std::string> names;
  for (const auto& spec : variantSpecs()) {
    names.push_back(spec.name);
  }
  const std::vector<std::string> close = closestNames(name, names);
  return "unknown TAEHV variant '" + name + "'" + (close.empty() ? "" : " (did you mean '" + close[0] + "'?)") +
         "; valid: " + variantList();
}

std::string variantForCheckpoint(const std::string& path) {
  const std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  std::string best;
  for (const auto& spec : variantSpecs()) {
    const std::string& n = spec.name;
    if (base.compare(0, n.size(), n) != 0 || n.size() <= best.size()) {
      continue;
    }
    const char next = base.size() == n.size() ? '\0' : base[n.size()];
    if (next == '\0' || next == '.' || next == '_' || next == '-') {
      best = n;
    }
  }
  return best;
}

}  // namespace taehv
