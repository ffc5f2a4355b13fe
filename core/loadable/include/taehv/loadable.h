// Who may have written the code taehv-run loads, and whether the file can be read without waiting: the checks a backend
// plugin and a library named by path (TAEHV_NVML_LIBRARY, TAEHV_CUDA_DRIVER_LIBRARY, TAEHV_NCCL_LIBRARY) pass before
// anything opens them. The ELF layout check that follows is elf_check.h's.
//
// The owner rule is OpenSSH's StrictModes (auth.c, safe_path): code runs with the rights of whoever runs taehv-run,
// often root, so a file or a folder holding it that anyone but root and that user can change is refused: writable by
// its group or by everyone, or owned by another user. The type is checked with stat() before open(): opening a FIFO
// for reading waits for a writer, for ever.
#pragma once

#include <sys/stat.h>

#include <string>

#include "taehv/checked.h"

namespace taehv {

/// Fails when anyone but root and the running user can change `st` (a file or folder at `path`; `what` names it, e.g.
/// "plugin folder (from --plugin-dir)"): owned by another user, writable by everyone, or writable by its group. The
/// line names the path, what it is, its owner, group and mode, and the command that fixes it, e.g.
/// "/opt/p: plugin folder (from --plugin-dir) is writable by its group staff (owner root, mode 0775); refusing to load
/// code from it: run chmod g-w /opt/p".
Status checkOwnerAndMode(const std::string& path, const struct stat& st, const std::string& what);

/// The checks before a file of code at `path` is opened (`what` names it, e.g. "plugin file"): stat() says it is a
/// regular file (following links; a FIFO, a folder or a device is refused without being opened), and
/// checkOwnerAndMode passes for it and for the folder holding it (and, for a link, the folder of the file it points
/// to). Each failure is one line starting with the path. A path that does not exist fails with `missing` set, so a
/// caller may treat "not there" apart from "there but refused".
Status checkLoadableFile(const std::string& path, const std::string& what, bool* missing = nullptr);

}  // namespace taehv
