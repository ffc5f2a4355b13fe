// The one video file-name rule: which names encode/decode/roundtrip and the training data take as video files.
// Built with or without FFmpeg (a build without it still names what it refuses).
#include <algorithm>
#include <cctype>

#include "taehv/video/video_file.h"

namespace taehv::video {

bool isVideoFileName(const std::string& path) {
  const std::string::size_type dot = path.rfind('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos) return false;
  std::string extension = path.substr(dot);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(kVideoFileExtensions.begin(), kVideoFileExtensions.end(),
                     [&](const char* known) { return extension == known; });
}

std::string videoFileExtensionList() {
  std::string out;
  for (const char* extension : kVideoFileExtensions) {
    if (!out.empty()) out += ' ';
    out += extension;
  }
  return out;
}

}  // namespace taehv::video
