#include "taehv/elf_check.h"

#include <elf.h>
#include <link.h>  // ElfW(): the ELF types of this process's class
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "taehv/files/input_file.h"

namespace taehv {
namespace {

/// Does [offset, offset + count * size) fit in a file of `file_size` bytes? Overflow-safe.
bool fits(std::uint64_t offset, std::uint64_t count, std::uint64_t size, std::uint64_t file_size) {
  if (offset > file_size) return false;
  if (size != 0 && count > (file_size - offset) / size) return false;
  return true;
}

bool readAt(int fd, void* out, std::size_t size, std::uint64_t offset) {
  auto* bytes = static_cast<char*>(out);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, bytes + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

/// The ELF machine this process runs on (EM_*), 0 when this table does not know it (then nothing is compared).
constexpr std::uint16_t kHostMachine =
#if defined(__x86_64__)
    EM_X86_64;
#elif defined(__aarch64__)
    EM_AARCH64;
#elif defined(__i386__)
    EM_386;
#elif defined(__arm__)
    EM_ARM;
#elif defined(__powerpc64__)
    EM_PPC64;
#elif defined(__riscv)
    EM_RISCV;
#elif defined(__s390x__)
    EM_S390;
#else
    0;
#endif

/// A machine's name as `file` and `readelf -h` say it, for the ones taehv-run is built for; else its number.
std::string machineName(std::uint16_t machine) {
  switch (machine) {
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "AArch64 (ARM 64-bit)";
    case EM_386: return "Intel 80386 (x86 32-bit)";
    case EM_ARM: return "ARM (32-bit)";
    case EM_PPC64: return "PowerPC64";
    case EM_PPC: return "PowerPC";
    case EM_RISCV: return "RISC-V";
    case EM_S390: return "IBM S/390";
    case EM_MIPS: return "MIPS";
    case EM_SPARCV9: return "SPARC V9";
    default: return "machine " + std::to_string(machine);
  }
}

constexpr unsigned char kHostClass = sizeof(void*) == 8 ? ELFCLASS64 : ELFCLASS32;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
constexpr unsigned char kHostData = ELFDATA2LSB;
#else
constexpr unsigned char kHostData = ELFDATA2MSB;
#endif

}  // namespace

Status checkElfSharedObject(const std::string& path) {
  // Type checked before the open (input_file.h): a FIFO named like a library is refused, not waited on.
  const Checked<files::OpenedFile> file = files::openInputFile(path, "", files::Role::kOther);
  if (!file.ok()) return {file.error};
  const int fd = file.value.fd.get();
  const std::uint64_t file_size = file.value.size;
  const std::string size_text = std::to_string(file_size) + " bytes";

  ElfW(Ehdr) ehdr{};
  if (file_size < sizeof ehdr || !readAt(fd, &ehdr, sizeof ehdr, 0)) {
    if (file_size >= SELFMAG && readAt(fd, &ehdr, SELFMAG, 0) && std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) == 0) {
      return {"cut short: the ELF header needs " + std::to_string(sizeof ehdr) + " bytes but the file has " +
              size_text};
    }
    return {"no ELF header"};
  }
  if (std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0) return {"no ELF header"};
  // The machine first, in the file's byte order (e_machine sits at the same offset in both classes): dlopen says
  // only "No such file or directory" for another one.
  const bool swapped = ehdr.e_ident[EI_DATA] != kHostData;
  const std::uint16_t machine =
      swapped ? static_cast<std::uint16_t>((ehdr.e_machine >> 8) | (ehdr.e_machine << 8)) : ehdr.e_machine;
  if (kHostMachine != 0 && machine != kHostMachine) {
    return {"built for " + machineName(machine) + ", but this taehv-run runs on " + machineName(kHostMachine)};
  }
  if (ehdr.e_ident[EI_CLASS] != kHostClass) {
    return {std::string("an ELF file of the other class (") + (ehdr.e_ident[EI_CLASS] == ELFCLASS32 ? "32" : "64") +
            "-bit or unknown) than this " + std::to_string(sizeof(void*) * 8) + "-bit taehv-run"};
  }
  if (ehdr.e_ident[EI_DATA] != kHostData) return {"an ELF file of the other byte order than this machine"};
  if (ehdr.e_type != ET_DYN) {
    return {"an ELF file but not a shared library (e_type " + std::to_string(ehdr.e_type) + ")"};
  }
  if (ehdr.e_phnum == 0 || ehdr.e_phentsize != sizeof(ElfW(Phdr))) {
    return {"corrupted: the ELF header's program header table is invalid"};
  }
  if (!fits(ehdr.e_phoff, ehdr.e_phnum, sizeof(ElfW(Phdr)), file_size)) {
    return {"cut short or corrupted: the program headers end past the end of the file (" + size_text + ")"};
  }
  std::vector<ElfW(Phdr)> phdrs(ehdr.e_phnum);
  if (!readAt(fd, phdrs.data(), phdrs.size() * sizeof(ElfW(Phdr)), ehdr.e_phoff)) {
    return {"cannot read its program headers"};
  }
  bool loadable = false;
  for (std::size_t i = 0; i < phdrs.size(); ++i) {
    const ElfW(Phdr)& ph = phdrs[i];
    // What the dynamic loader maps (PT_LOAD) or reads before it runs anything (PT_DYNAMIC, PT_INTERP, notes).
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC && ph.p_type != PT_INTERP && ph.p_type != PT_NOTE &&
        ph.p_type != PT_GNU_PROPERTY) {
      continue;
    }
    loadable = loadable || ph.p_type == PT_LOAD;
    if (ph.p_type == PT_LOAD && ph.p_filesz > ph.p_memsz) {
      return {"corrupted: segment " + std::to_string(i) + " is larger in the file than in memory"};
    }
    if (!fits(ph.p_offset, 1, ph.p_filesz, file_size)) {
      return {"cut short: segment " + std::to_string(i) + " ends at byte " +
              std::to_string(static_cast<std::uint64_t>(ph.p_offset) + ph.p_filesz) + " but the file has " +
              size_text};
    }
  }
  if (!loadable) return {"corrupted: no loadable segment"};
  // Section headers are not mapped by dlopen, but a table past the end is the surest sign of a file cut short.
  if (ehdr.e_shnum != 0 &&
      (ehdr.e_shentsize != sizeof(ElfW(Shdr)) || !fits(ehdr.e_shoff, ehdr.e_shnum, sizeof(ElfW(Shdr)), file_size))) {
    return {"cut short or corrupted: the section headers end past the end of the file (" + size_text + ")"};
  }
  return {};
}

}  // namespace taehv
