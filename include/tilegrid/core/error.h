#pragma once
// Errors are exceptions whose message says what was expected and what was given.
// The kind maps onto the Python exception a PyTorch user expects: ValueError for a bad
// shape or value, TypeError for a bad dtype, RuntimeError for everything else.
#include <sstream>
#include <stdexcept>
#include <string>

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

namespace detail {
template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace tilegrid

// TG_CHECK_VALUE(rows > 0, "x: expected at least one row, got shape ", x.shape());
#define TG_CHECK_VALUE(cond, ...) \
  do {                            \
    if (!(cond)) throw ::tilegrid::ValueError(::tilegrid::detail::concat(__VA_ARGS__)); \
  } while (0)
#define TG_CHECK_TYPE(cond, ...) \
  do {                           \
    if (!(cond)) throw ::tilegrid::TypeError(::tilegrid::detail::concat(__VA_ARGS__)); \
  } while (0)
#define TG_CHECK(cond, ...) \
  do {                      \
    if (!(cond)) throw ::tilegrid::Error(::tilegrid::detail::concat(__VA_ARGS__)); \
  } while (0)
