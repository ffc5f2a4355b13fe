// A look at a file of code (a plugin, a library named by path) before dlopen maps it: is it an ELF shared object of
// this machine's kind, and does every part of the file its headers point at lie inside the file?
//
// Why: dlopen maps each PT_LOAD segment of the file and the dynamic loader reads it right away. A segment that
// reaches past the end of a file that was cut short (an interrupted copy, a full disk) is mapped all the same,
// and the first read of a page beyond the end kills the whole process with SIGBUS, before any error can be
// reported. Checking the headers against the file's size (read with pread, nothing mapped) turns that into one
// line naming the file. It is a check of the layout, not of every byte: a file whose segments are inside the
// file but whose contents are garbage is left to dlopen's own checks.
#pragma once

#include <string>

#include "taehv/checked.h"

namespace taehv {

/// Succeeds when the file at `path` is an ELF shared object of this process's machine, class and byte order whose
/// program headers, loadable segments and section headers all lie within the file; otherwise fails with the reason, a
/// few words without the path (e.g. "cut short: segment 2 ends at byte 16384 but the file has 10000 bytes", "built for
/// AArch64 (ARM 64-bit), but this taehv-run runs on x86-64": dlopen's own words for another machine are "No such file
/// or directory"). Opens the file without blocking; the caller checks its type first (loadable.h).
Status checkElfSharedObject(const std::string& path);

}  // namespace taehv
