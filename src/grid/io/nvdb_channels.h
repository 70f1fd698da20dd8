#pragma once
// How a feature tensor is described in a NanoVDB channel array (internal to the .nvdb reader
// and writer). NanoVDB 32.4's blind data records an element type and an element count only,
// so the channel's name carries tilegrid's dtype and the per-voxel shape as well:
// "feature_<k>:<dtype>[<d1>,<d2>,...]" ("feature_0:float32[]" for one value a voxel). The
// element type is the closest NanoVDB GridType of the scalar dtype (Unknown where NanoVDB 32.4
// has none: uint8, bfloat16), and the element count counts scalars.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "grid/io/nvdb_layout.h"
#include "tilegrid/core/dtype.h"
#include "tilegrid/core/shape.h"

namespace tilegrid::grid::nvdb {

constexpr DType kAllDTypes[] = {DType::Bool,    DType::UInt8,    DType::Int32,   DType::Int64,
                                DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

constexpr GridType grid_type_of(DType dtype) {
  switch (dtype) {
    case DType::Bool:
      return GridType::Boolean;
    case DType::Int32:
      return GridType::Int32;
    case DType::Int64:
      return GridType::Int64;
    case DType::Float16:
      return GridType::Half;
    case DType::Float32:
      return GridType::Float;
    case DType::Float64:
      return GridType::Double;
    case DType::UInt8:
    case DType::BFloat16:
      return GridType::Unknown;
  }
  return GridType::Unknown;
}

// "feature_<k>:<dtype>[<shape>]" for a feature whose rows have shape `row`.
inline std::string channel_name(size_t k, DType dtype, const Shape& row) {
  std::string s = "feature_" + std::to_string(k) + ":" + std::string(name(dtype)) + "[";
  for (int d = 0; d < row.size(); ++d) {
    if (d) s += ",";
    s += std::to_string(row[d]);
  }
  return s + "]";
}

struct ChannelDesc {
  DType dtype;
  Shape row;  // per-voxel shape
};

// The dtype and per-voxel shape in a name written by channel_name; nullopt for other names.
inline std::optional<ChannelDesc> parse_channel_name(std::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || !s.starts_with("feature_") || !s.ends_with("]"))
    return std::nullopt;
  const size_t open = s.find('[', colon);
  if (open == std::string_view::npos) return std::nullopt;
  const std::string_view dtype_name = s.substr(colon + 1, open - colon - 1);
  ChannelDesc desc{DType::Float32, {}};
  bool known = false;
  for (DType d : kAllDTypes)
    if (name(d) == dtype_name) desc.dtype = d, known = true;
  if (!known) return std::nullopt;
  std::string_view dims = s.substr(open + 1, s.size() - open - 2);
  while (!dims.empty()) {
    int64_t extent = 0;
    const auto [end, ec] = std::from_chars(dims.data(), dims.data() + dims.size(), extent);
    if (ec != std::errc() || extent < 0 || desc.row.size() + 1 >= Shape::kMaxDims)
      return std::nullopt;
    desc.row.push_back(extent);
    dims.remove_prefix(size_t(end - dims.data()));
    if (!dims.empty()) {
      if (dims.front() != ',' || dims.size() == 1) return std::nullopt;
      dims.remove_prefix(1);
    }
  }
  return desc;
}

// The dtype and per-voxel shape of a channel array that NanoVDB wrote (no tilegrid name),
// from its element type: scalars of `values_per_index` a voxel, or vectors.
inline std::optional<ChannelDesc> channel_of_grid_type(uint32_t type, uint64_t values_per_index) {
  Shape row;
  if (values_per_index != 1) row.push_back(int64_t(values_per_index));
  auto scalar = [&](DType d) { return std::optional<ChannelDesc>(ChannelDesc{d, row}); };
  auto vector = [&](DType d, int64_t n) {
    Shape r{n};
    if (values_per_index != 1) r = Shape{int64_t(values_per_index), n};
    return std::optional<ChannelDesc>(ChannelDesc{d, r});
  };
  switch (GridType(type)) {
    case GridType::Float:
      return scalar(DType::Float32);
    case GridType::Double:
      return scalar(DType::Float64);
    case GridType::Int32:
      return scalar(DType::Int32);
    case GridType::Int64:
      return scalar(DType::Int64);
    case GridType::Half:
      return scalar(DType::Float16);
    case GridType::Boolean:
      return scalar(DType::Bool);
    case GridType::Vec3f:
      return vector(DType::Float32, 3);
    case GridType::Vec3d:
      return vector(DType::Float64, 3);
    case GridType::Vec4f:
      return vector(DType::Float32, 4);
    case GridType::Vec4d:
      return vector(DType::Float64, 4);
    default:
      return std::nullopt;
  }
}

}  // namespace tilegrid::grid::nvdb
