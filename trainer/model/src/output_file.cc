#include "taehv/model/output_file.h"

namespace taehv {

void writeFileAtomically(const std::string& path, const std::function<bool(int fd)>& fill) {
  if (Status written = files::writeFileAtomically(path, fill); !written.ok()) throw OutputFileError(written.error);
}

files::FileDescriptor openForAppend(const std::string& path) {
  Checked<files::FileDescriptor> opened = files::openForAppend(path);
  if (!opened.ok()) throw OutputFileError(opened.error);
  return std::move(opened.value);
}

}  // namespace taehv
