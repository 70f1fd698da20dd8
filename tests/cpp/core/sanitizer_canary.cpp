// Faults that a sanitizer build must report, one per argument: CTest passes each run only on
// the sanitizer's report, so that a build whose sanitizers are silently off fails instead of
// passing every other test unchecked.
#include <climits>
#include <cstring>
#include <memory>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  if (std::strcmp(argv[1], "heap-buffer-overflow") == 0) {
    auto values = std::make_unique<int[]>(4);
    volatile int past_the_end = 4;  // volatile: no compiler warning, no folding
    return values[past_the_end];
  }
  if (std::strcmp(argv[1], "signed-integer-overflow") == 0) {
    volatile int largest = INT_MAX;
    const int sum = largest + 1;
    return sum == 0;
  }
  return 2;
}
