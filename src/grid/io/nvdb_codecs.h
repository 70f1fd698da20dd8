#pragma once
// Decompression of the grid buffers in compressed NanoVDB files (internal to the .nvdb reader).
// NanoVDB's writer offers two codecs: ZIP (zlib's compress() over the whole grid) and BLOSC
// (c-blosc 1.x with LZ4, in chunks of at most nvdb::kCodecChunk bytes). Each is compiled in
// where the build found its library (zlib, c-blosc); without it, a file that needs it is
// refused with a message saying how to get it.
#include <cstddef>
#include <cstdint>
#include <string>

namespace tilegrid::grid::nvdb {

// Whether this build can read grids compressed with `codec` (kCodecZip or kCodecBlosc).
bool codec_available(uint16_t codec);

// "ZIP" or "BLOSC", and the library that reads it.
std::string codec_name(uint16_t codec);
std::string codec_library(uint16_t codec);

// Decompresses `in` (one compressed chunk: the whole grid for ZIP, one chunk for BLOSC) into
// exactly `out_size` bytes at `out`. Returns an empty string on success, else what went wrong
// (the library's status, or a size that differs from `out_size`).
std::string decompress(uint16_t codec, const std::byte* in, size_t in_size, std::byte* out,
                       size_t out_size);

}  // namespace tilegrid::grid::nvdb
