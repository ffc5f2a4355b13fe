// libFuzzer target: any bytes as a plugin file given to the pre-dlopen ELF check (through a memfd, a real file the
// check opens by path) give "" or a reason; never a crash or undefined behaviour. Accepted files have every
// loadable segment inside the file. Seeds: real plugins (build/lib/taehv/plugins/*.so).
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "taehv/elf_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("plugin", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  const std::string why = taehv::checkElfSharedObject("/proc/self/fd/" + std::to_string(fd)).error;
  if (why.empty()) {
    if (size < sizeof(ElfW(Ehdr))) std::abort();
    ElfW(Ehdr) h;
    __builtin_memcpy(&h, data, sizeof h);
    for (int i = 0; i < h.e_phnum; ++i) {
      ElfW(Phdr) ph;
      const std::size_t at = h.e_phoff + static_cast<std::size_t>(i) * sizeof ph;
      if (at + sizeof ph > size) std::abort();  // accepted headers must lie inside the file
      __builtin_memcpy(&ph, data + at, sizeof ph);
      if (ph.p_type == PT_LOAD && ph.p_offset + ph.p_filesz > size) std::abort();
    }
  }
  return 0;
}
