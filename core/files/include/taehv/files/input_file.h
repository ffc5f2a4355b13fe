// The one way in for files a user names (--config, --hostfile, --job-token-file, --weights, --input, a checkpoint,
// a plugin file), for taehv-run, taehv-train and the plugins alike.
//
// The rule: a path's type is checked before it is opened. Only a regular file is opened; a FIFO (whose open waits
// for a writer: a hang), a device (/dev/zero never ends), a socket or a folder is refused with one line and never
// opened. The open itself cannot block either (O_NONBLOCK, then fstat again), so a file swapped for a FIFO between
// the check and the open is refused too. A file read whole is read up to a size the caller gives, so /dev/zero or
// a huge file ends in one line instead of memory growth. Readers that must open by name themselves (FFmpeg,
// libtorch's archives, dlopen) call checkInputFile first; only the moment between that check and their open is
// not covered.
//
// Messages: "WHAT PATH: what is wrong; how to fix it", WHAT naming the file's role ("--hostfile").
//
// A file read with Role::kInput is remembered (device and inode) as an input of this command: output_file.h
// refuses to write over it, whatever the output's spelling (another path, a symbolic or hard link).
// Thread-safe. std + POSIX only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "taehv/checked.h"
#include "taehv/files/file_descriptor.h"

namespace taehv::files {

/// Whether a read makes the file an input of this command, which no output of the same command may replace.
enum class Role {
  kInput,  ///< named by the user for this command: --weights, --input, --config, --hostfile, a token file
  kOther,  ///< bulk reads (a data set's files) and the program's own files, which it may rewrite (metrics.jsonl)
};

/// The bound for small text files read whole: configs, hostfiles, token files, manifests, error files.
inline constexpr std::uint64_t kMaxTextFileBytes = 4ull << 20;

/// A regular file opened for reading: a blocking, close-on-exec descriptor and the file's size when opened.
struct OpenedFile {
  FileDescriptor fd;
  std::uint64_t size = 0;
};

/// Checks without opening it that `path` names a regular file (symbolic links followed). For readers that open
/// by name themselves. `what` names the file's role in the message ("--weights"; may be empty).
Status checkInputFile(const std::string& path, std::string_view what, Role role);

/// Opens `path` for reading after the check above, with an open that cannot block.
Checked<OpenedFile> openInputFile(const std::string& path, std::string_view what, Role role);

/// The whole content of `path` (opened as above); a file of more than `max_bytes` bytes is refused (counted while
/// reading too, so a file that grows while read, or a /proc file that reports size 0, is bounded as well).
Checked<std::string> readInputFile(const std::string& path, std::string_view what, Role role,
                                   std::uint64_t max_bytes = kMaxTextFileBytes);

/// An input of this command (read with Role::kInput): how it was named and its path as given.
struct InputRecord {
  std::string what;
  std::string path;
};

/// The input of this command that is the file (device, inode) `path` names now, if any; nullopt when `path` does
/// not exist or is no input. Used by output_file.h.
std::optional<InputRecord> inputAt(const std::string& path);

/// "WHAT PATH" (or "PATH" without a WHAT): how messages name a file.
std::string fileLabel(std::string_view what, const std::string& path);

/// "a folder", "a FIFO (named pipe)", "a character device", ... for a st_mode that is not a regular file.
std::string fileKind(unsigned mode);

/// A byte count for messages: "512 bytes", "16 MiB", "3.2 GiB".
std::string byteCountText(std::uint64_t bytes);

}  // namespace taehv::files
