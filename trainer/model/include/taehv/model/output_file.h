// Files the trainer writes for a user (weights, latents, videos, previews, checkpoint files, metrics): the trainer's
// face of taehv/files/output_file.h, where the rule lives (a temporary beside the target, renamed; the umask and an
// old file's mode kept; never over a device, a FIFO, a folder or an input of the same command), with its failures
// thrown as OutputFileError, as the trainer's commands report them. No libtorch here.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

#include "taehv/files/output_file.h"

namespace taehv {

/// A refused output path or a failed write. The message names the file, the reason, and (for write failures) the
/// free space of its folder.
struct OutputFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// files::writeFileAtomically: `fill(fd)` writes the content and returns false with errno set when a write fails.
/// Throws OutputFileError (an exception `fill` throws is rethrown unchanged); nothing at `path` changes then.
void writeFileAtomically(const std::string& path, const std::function<bool(int fd)>& fill);

/// files::openForAppend: a descriptor to append to `path` (created with the umask's mode when missing). Throws
/// OutputFileError.
files::FileDescriptor openForAppend(const std::string& path);

using files::freeSpaceNote;
using files::writeAllBytes;

}  // namespace taehv
