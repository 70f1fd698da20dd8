// The two codecs of compressed NanoVDB files, each through its library where the build has it
// (TILEGRID_WITH_ZLIB, TILEGRID_WITH_BLOSC: see src/CMakeLists.txt and docs/DEPENDENCIES.md).
#include "grid/io/nvdb_codecs.h"

#include "grid/io/nvdb_layout.h"
#include "tilegrid/core/checks.h"

#ifdef TILEGRID_WITH_ZLIB
#include <zlib.h>
#endif
#ifdef TILEGRID_WITH_BLOSC
#include <blosc.h>
#endif

namespace tilegrid::grid::nvdb {

bool codec_available(uint16_t codec) {
#ifdef TILEGRID_WITH_ZLIB
  if (codec == kCodecZip) return true;
#endif
#ifdef TILEGRID_WITH_BLOSC
  if (codec == kCodecBlosc) return true;
#endif
  return codec == kCodecNone;
}

std::string codec_name(uint16_t codec) {
  return codec == kCodecZip ? "ZIP" : codec == kCodecBlosc ? "BLOSC" : "NONE";
}

std::string codec_library(uint16_t codec) {
  return codec == kCodecZip ? "zlib (Debian: zlib1g-dev)" : "c-blosc 1.x (Debian: libblosc-dev)";
}

std::string decompress(uint16_t codec, const std::byte* in, size_t in_size, std::byte* out,
                       size_t out_size) {
  (void)in, (void)in_size, (void)out, (void)out_size;
#ifdef TILEGRID_WITH_ZLIB
  if (codec == kCodecZip) {
    uLongf produced = uLongf(out_size);
    const int status = uncompress(reinterpret_cast<Bytef*>(out), &produced,
                                  reinterpret_cast<const Bytef*>(in), uLong(in_size));
    if (status != Z_OK) return detail::concat("zlib's uncompress failed (status ", status, ")");
    if (produced != out_size)
      return detail::concat("zlib produced ", int64_t(produced), " bytes, the record gives ",
                            int64_t(out_size));
    return {};
  }
#endif
#ifdef TILEGRID_WITH_BLOSC
  if (codec == kCodecBlosc) {
    // The chunk's own header gives its decompressed size; check it before writing a byte.
    size_t nbytes = 0, cbytes = 0, blocksize = 0;
    if (in_size < BLOSC_MIN_HEADER_LENGTH) return "the chunk is shorter than a BLOSC header";
    blosc_cbuffer_sizes(in, &nbytes, &cbytes, &blocksize);
    if (cbytes != in_size || nbytes != out_size)
      return detail::concat("the chunk's BLOSC header gives ", int64_t(cbytes),
                            " compressed bytes for ", int64_t(nbytes), ", the file ",
                            int64_t(in_size), " for ", int64_t(out_size));
    const int produced = blosc_decompress_ctx(in, out, out_size, 1);
    if (produced < 0 || size_t(produced) != out_size)
      return detail::concat("c-blosc's decompression failed (status ", produced, ")");
    return {};
  }
#endif
  return detail::concat("this build of tilegrid cannot read ", codec_name(codec));
}

}  // namespace tilegrid::grid::nvdb
