#pragma once
// Saving and loading a GridBatch with its features as a NanoVDB file (.nvdb).
//
// save_nvdb writes NanoVDB 32.9's format by default, which NanoVDB 32.5 and later and fVDB
// read, or NanoVDB 32.4's (NvdbFormat::V32_4), which NanoVDB 32.4's tools and io::readGrids
// (Debian's libnanovdb-dev) read. Each kind of reader accepts the other's files (one major
// version) but reads them with its own layout: NanoVDB 32.5+ misnumbers the voxels of a 32.4
// file, and 32.4 refuses the OnIndex grids of a 32.9 one. Write the format of the reader that
// will open the file; the default is the one whose mismatch fails loudly.
//
// Each grid of the batch becomes one NanoVDB index grid (32.9: GridType::OnIndex; 32.4:
// GridType::Index; GridClass::IndexGrid, leaves that index active voxels only), named
// "grid_<b>" unless names are given. Its map is the grid's transform (world = origin + voxel_size *
// ijk), its index and world bounding boxes follow NanoVDB's conventions, and its header checksum is
// computed the way NanoVDB's default ("partial") mode does.
//
// NanoVDB reserves index 0 of an index grid for the background (every inactive voxel reads
// 0), so the voxel in feature row r of grid b (r counted from the grid's first row) has
// NanoVDB index r + 1. Each feature tensor becomes one channel array (blind data) of every
// grid, num_voxels(b) + 1 rows long with a row of zeros first, so that NanoVDB's
// ChannelAccessor reads a voxel's row at its index. The channel's name records what NanoVDB's
// blind data has no field for, the dtype and the per-voxel shape: "feature_<k>:float32[3]".
#include <string>
#include <vector>

#include "tilegrid/grid/grid_batch.h"

namespace tilegrid::grid {

// The NanoVDB format save_nvdb writes. The two differ in the index grid's type and leaf
// layout, the magic numbers and the extent of the header checksum; everything else is shared.
enum class NvdbFormat {
  V32_4,  // NanoVDB 32.4 (Debian's libnanovdb-dev): GridType::Index with sparse leaves
  V32_9,  // NanoVDB 32.9, read by 32.5 on and by fVDB: GridType::OnIndex
};

// Writes `grid` (copied to the CPU first when it lives on a GPU) and `features` (tensors of
// any tilegrid dtype and shape [total_voxels, ...], on any device) to `path`, replacing the
// file. `names`: one per grid (each at most 255 bytes), or empty for "grid_0", "grid_1", ...
void save_nvdb(const std::string& path, const GridBatch& grid,
               const std::vector<Tensor>& features = {}, const std::vector<std::string>& names = {},
               NvdbFormat format = NvdbFormat::V32_9);

struct NvdbContents {
  GridBatch grid;                  // on the CPU, rows in tilegrid's order
  std::vector<Tensor> features;    // one per channel, [total_voxels, ...] on the CPU
  std::vector<std::string> names;  // one per grid
};

// Reads every grid of a NanoVDB file (format 32.0 to 32.9) written by save_nvdb, by fVDB's save
// or by NanoVDB itself:
// - index grids (32.4's sparse Index; from 32.5 on OnIndex and dense Index): their channel
//   arrays become features (rows reordered into tilegrid's row order), and so does the tensor
//   fVDB stores in its "fvdb_jdata<dtype>" record on grids of class TensorGrid;
// - grids of values (Float, Double, Int32, Int64, UInt8, Vec3f, Vec3d, Vec4f, Vec4d, RGBA8):
//   the active voxels' values become one feature, shaped as fVDB's "fvdb_jdata" record says
//   where there is one (a Float grid saved from [N, 1] loads as [N, 1]).
// Other blind data is skipped. Every grid must carry the same features (dtype and per-voxel
// shape). Grids compressed with ZIP or BLOSC are read where the build has zlib or c-blosc
// (BuildInfo::nvdb_codecs). Files with active tiles, other value types or another NanoVDB
// version raise an error that says so.
//
// Errors: Error (RuntimeError in Python) when the file cannot be opened or read; ValueError for
// every file that is not one load_nvdb reads, whatever its bytes, with a message naming the
// file, the grid and what was expected and found. Grid names must be UTF-8 (save writes them
// so); other names are refused, not decoded with replacements, so a loaded name is the one
// stored. Work and memory are bounded by the file's size.
NvdbContents load_nvdb(const std::string& path);

}  // namespace tilegrid::grid
