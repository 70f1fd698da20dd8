#pragma once
// Errors are exceptions whose message says what was expected and what was given.
// The kind maps onto the Python exception a PyTorch user expects: ValueError for a bad
// shape or value, TypeError for a bad dtype, RuntimeError for everything else.
#include <charconv>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace tilegrid {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ValueError : public Error {
 public:
  using Error::Error;
};
class TypeError : public Error {
 public:
  using Error::Error;
};

// Messages are assembled without iostreams: a Python extension built with a statically
// linked libstdc++ (some toolchains do that) can crash formatting numbers through a locale
// that the process's other libstdc++ initialised. Types of tilegrid add `append` overloads
// in namespace tilegrid, found by argument-dependent lookup.
namespace detail {
inline void append(std::string& s, std::string_view v) {
  s += v;
}
inline void append(std::string& s, const char* v) {
  s += v;
}
inline void append(std::string& s, char c) {
  s += c;
}
template <class T>
requires std::is_integral_v<T>
void append(std::string& s, T v) {
  char buf[24];
  s.append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}
inline void append(std::string& s, double v) {
  char buf[32];
  s.append(buf, std::to_chars(buf, buf + sizeof(buf), v).ptr);
}

template <class... Args>
std::string concat(const Args&... args) {
  std::string s;
  (append(s, args), ...);
  return s;
}
}  // namespace detail

}  // namespace tilegrid

// TG_CHECK_VALUE(rows > 0, "x: expected at least one row, got shape ", x.shape());
#define TG_CHECK_VALUE(cond, ...)                                                       \
  do {                                                                                  \
    if (!(cond)) throw ::tilegrid::ValueError(::tilegrid::detail::concat(__VA_ARGS__)); \
  } while (0)
#define TG_CHECK_TYPE(cond, ...)                                                       \
  do {                                                                                 \
    if (!(cond)) throw ::tilegrid::TypeError(::tilegrid::detail::concat(__VA_ARGS__)); \
  } while (0)
#define TG_CHECK(cond, ...)                                                        \
  do {                                                                             \
    if (!(cond)) throw ::tilegrid::Error(::tilegrid::detail::concat(__VA_ARGS__)); \
  } while (0)
