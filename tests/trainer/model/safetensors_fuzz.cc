// libFuzzer target: any byte string handed to the safetensors header parser as a whole file must give either a
// validated header or SafetensorsError; never a crash, an out-of-bounds read (ASan) or undefined behaviour (UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "taehv/model/safetensors_format.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const taehv::SafetensorsHeader header = taehv::parseSafetensorsHeader(data, size, size, "fuzz");
    // Every validated entry must lie inside the buffer: touch its first and last byte.
    for (const auto& e : header.entries) {
      if (e.end > e.begin) {
        volatile uint8_t first = data[header.data_offset + e.begin];
        volatile uint8_t last = data[header.data_offset + e.end - 1];
        (void)first;
        (void)last;
      }
      if (header.data_offset + e.end > size) {
        std::abort();
      }
    }
  } catch (const taehv::SafetensorsError&) {
    // Expected for malformed input.
  }
  return 0;
}
