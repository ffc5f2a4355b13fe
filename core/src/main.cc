// Bootstrap entry point; replaced by the real CLI (core issue).
#include <cstdio>
int main() {
  std::printf("taehv-run %s\n", TAEHV_VERSION);
  return 0;
}
