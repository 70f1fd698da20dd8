#pragma once
// Where a tensor's memory lives: host memory or one CUDA device.
#include <cstdint>
#include <ostream>
#include <string>

namespace tilegrid {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  static constexpr Device cpu() { return {DeviceType::CPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }

  constexpr bool is_cpu() const { return type == DeviceType::CPU; }
  constexpr bool is_cuda() const { return type == DeviceType::CUDA; }
  constexpr bool operator==(const Device&) const = default;

  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

inline std::ostream& operator<<(std::ostream& os, const Device& device) {
  return os << device.str();
}
inline void append(std::string& s, const Device& device) {
  s += device.str();
}

// A CUDA stream handle, kept opaque so that public headers need no CUDA headers.
// The null handle is the legacy default stream.
struct Stream {
  void* handle = nullptr;
};

}  // namespace tilegrid
