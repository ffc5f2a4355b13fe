// Bootstrap entry point; replaced by the sub-command table (trainer issues).
#include <cstdio>
int main() {
  std::puts("taehv-train");
  return 0;
}
