#pragma once
// parallel_for(n, body): body(i) for every i in [0, n), spread over the machine's cores (the
// calling thread is one of them). For CPU loops whose iterations write disjoint outputs, so
// the result does not depend on the thread count (internal).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace tilegrid {

template <class Body>
void parallel_for(int64_t n, Body body) {
  const int64_t threads =
      std::min<int64_t>(n, std::max<unsigned>(1, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::atomic<int64_t> next{0};
  auto work = [&] {
    for (int64_t i = next++; i < n; i = next++) body(i);
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace tilegrid
