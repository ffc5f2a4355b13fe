#include "taehv/loadable.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>
#include <vector>

#include "taehv/files/input_file.h"
#include "taehv/shell_quote.h"

namespace taehv {
namespace {

namespace fs = std::filesystem;

/// The name of a user or group `id` (getpwuid_r / getgrgid_r into `Entry`, its name in `name`), else "<kind> <id>".
template <typename Entry, typename Id>
std::string entryName(Id id, int (*lookup)(Id, Entry*, char*, std::size_t, Entry**), char* Entry::*name,
                      const char* kind) {
  std::vector<char> buffer(16384);
  Entry entry{};
  Entry* found = nullptr;
  if (lookup(id, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) return entry.*name;
  return std::string(kind) + " " + std::to_string(id);
}

std::string userName(uid_t uid) { return entryName<passwd, uid_t>(uid, ::getpwuid_r, &passwd::pw_name, "uid"); }
std::string groupName(gid_t gid) { return entryName<group, gid_t>(gid, ::getgrgid_r, &group::gr_name, "gid"); }

std::string octalMode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

/// The folder holding `path` as written ("." for a bare name).
std::string folderOf(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

Status checkFolder(const std::string& folder, const std::string& what) {
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0) return {folder + ": cannot read the " + what + " (" + std::strerror(errno) + ")"};
  return checkOwnerAndMode(folder, st, what);
}

}  // namespace

Status checkOwnerAndMode(const std::string& path, const struct stat& st, const std::string& what) {
  const uid_t me = ::geteuid();
  const std::string refusing = "; refusing to load code from it: ";
  const std::string quoted = shellQuote(path);
  if (st.st_uid != 0 && st.st_uid != me) {
    return {path + ": " + what + " is owned by " + userName(st.st_uid) + ", neither root nor " + userName(me) +
            " who runs taehv-run (mode " + octalMode(st.st_mode) + ")" + refusing + "let root or " + userName(me) +
            " own it (chown " + shellQuote(userName(me)) + " " + quoted + ", as root) or use a copy of your own"};
  }
  const std::string owner = "owner " + userName(st.st_uid) + ", mode " + octalMode(st.st_mode);
  if (st.st_mode & S_IWOTH) {
    return {path + ": " + what + " is writable by everyone (" + owner + ")" + refusing + "run chmod o-w " + quoted};
  }
  if (st.st_mode & S_IWGRP) {
    return {path + ": " + what + " is writable by its group " + groupName(st.st_gid) + " (" + owner + ")" + refusing +
            "run chmod g-w " + quoted};
  }
  return {};
}

Status checkLoadableFile(const std::string& path, const std::string& what, bool* missing) {
  if (missing != nullptr) *missing = false;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {  // before any open(): the type decides whether opening can block
    const int error = errno;
    if (missing != nullptr) *missing = error == ENOENT || error == ENOTDIR;
    return {path + ": cannot read the " + what + " (" + std::strerror(error) + ")"};
  }
  if (!S_ISREG(st.st_mode)) {
    return {path + ": " + what + " is " + files::fileKind(st.st_mode) + ", not a regular file; refusing to open it (" +
            "reading a FIFO or a device can wait for ever): remove it, or name the library's file"};
  }
  if (Status file = checkOwnerAndMode(path, st, what); !file.ok()) return file;
  const std::string folder = folderOf(path);
  if (Status held = checkFolder(folder, "folder holding the " + what); !held.ok()) return held;
  // A link: whoever can change the folder of the file it points to can change the code too.
  const std::unique_ptr<char, decltype(&std::free)> real(::realpath(path.c_str(), nullptr), &std::free);
  if (real) {
    const std::string real_folder = folderOf(real.get());
    std::error_code same_error;
    if (!fs::equivalent(real_folder, folder, same_error)) {
      if (Status linked = checkFolder(real_folder, "folder of the file the " + what + " links to"); !linked.ok()) {
        return linked;
      }
    }
  }
  return {};
}

}  // namespace taehv
