// Files the trainer writes for a user (weights, latents, previews, checkpoint files): what a write may replace,
// and the one message a failed write gives. No libtorch here.
//
// The rule: outputs are replaced atomically (a temporary file beside the target, fsynced, renamed over it), so a
// crash or a full disk never leaves half a file under the final name. A rename replaces whatever has the name, so
// before writing, the target is checked: a regular file or nothing is replaced; a symbolic link is written through
// (its target gets the new content and the link stays, as `cp` does); anything else (a device such as /dev/null,
// a FIFO, a socket, a folder) is refused, because replacing it would destroy it.
#pragma once

#include <sys/types.h>

#include <functional>
#include <stdexcept>
#include <string>

namespace taehv {

/// A refused output path or a failed write. The message names the file, the reason, and (for write failures) the
/// free space of its folder.
struct OutputFileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The path a write to `path` replaces: `path`, or the end of the symbolic-link chain at `path`. Throws
/// OutputFileError when that exists and is not a regular file, or when the links loop.
std::string writableTarget(const std::string& path);

/// "FOLDER has N MiB free" from statvfs, or "the free space of FOLDER is unknown".
std::string freeSpaceNote(const std::string& folder);

/// Writes `path` atomically (see the rule above): `fill(fd)` writes the content into the temporary file and
/// returns false with errno set when a write fails. The temporary is removed on every failure, an exception
/// `fill` throws included (it is rethrown unchanged). Throws OutputFileError.
void writeFileAtomically(const std::string& path, const std::function<bool(int fd)>& fill, mode_t mode = 0644);

/// write(2) of all `size` bytes, retried on EINTR and short writes. False with errno set on failure.
bool writeAllBytes(int fd, const void* data, size_t size);

}  // namespace taehv
