// The one way out for every file taehv-run, taehv-train and the plugins write (weights, latents, videos,
// checkpoint files, previews, metrics, TensorBoard events, the torchelastic error file, sbatch --script, a bench
// profile). std + POSIX only.
//
// The rule: a file is replaced atomically: a temporary file beside the target, fsynced, renamed over it, so a crash
// or a full disk never leaves half a file under the final name. Before anything is written, the target is checked:
//  - a regular file or nothing is replaced; a symbolic link is written through (its target gets the new content
//    and the link stays, as `cp` does); anything else (a device such as /dev/null or /dev/full, a FIFO, a socket,
//    a folder) is refused, because the rename would destroy it;
//  - a file this command reads as an input (input_file.h, Role::kInput) is refused, compared by device and inode,
//    so no other spelling, symbolic or hard link of it gets through.
// The new file is created with mode 0666 less the umask, as any program's new file is; a replaced file keeps its
// mode, and (when run as root) its owner and group: a 0600 file stays 0600. Appending (openForAppend) follows the
// same checks.
//
// Messages: "cannot write 'PATH': why", with the folder's free space where a write failed; callers add their
// option's name in front.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "taehv/checked.h"
#include "taehv/files/file_descriptor.h"

namespace taehv::files {

/// The path a write to `path` replaces: `path`, or the end of the symbolic-link chain at `path`. An error when
/// that exists and is not a regular file, or when the links loop.
Checked<std::string> writableTarget(const std::string& path);

/// Checks before any work what can be known about a later write of `path`: writableTarget, not an input of this
/// command, and a folder that exists and this process may write (a read-only file system is refused here).
Status checkOutputFile(const std::string& path);

/// "FOLDER has N MiB free" from statvfs, or "the free space of FOLDER is unknown".
std::string freeSpaceNote(const std::string& folder);

/// Writes `path` by the rule above: `fill(fd)` writes the content into the temporary file (any number of writes,
/// seeks allowed) and returns false with errno set when a write fails. The temporary is removed on every failure,
/// an exception `fill` throws included (it is rethrown unchanged); nothing at `path` changes then.
Status writeFileAtomically(const std::string& path, const std::function<bool(int fd)>& fill);

/// writeFileAtomically of `content`.
Status writeFileAtomically(const std::string& path, std::string_view content);

/// Opens `path` for appending (created when missing, with the umask's mode): the same target checks as
/// writeFileAtomically, and an open that cannot block.
Checked<FileDescriptor> openForAppend(const std::string& path);

/// write(2) of all `size` bytes, retried on EINTR and short writes. False with errno set on failure.
bool writeAllBytes(int fd, const void* data, std::size_t size);

/// True for a name writeFileAtomically gives its temporaries: NAME.tmp.XXXXXX, six letters or digits (a killed
/// write leaves one behind).
bool isAtomicWriteTemporary(const std::string& name);

}  // namespace taehv::files
