// Reads a file tilegrid saved with nanovdb_version="32.9" using NanoVDB's own reader and checks
// every voxel against a listing of its rows (lines "grid row i j k value"): its index must be
// row + 1 and channel 0 (float32) must hold the value there; prints the checksum and validator
// verdicts. Build like make_files.cpp: g++ -std=c++17 -I<openvdb>/nanovdb read_with_nanovdb.cpp
#include <nanovdb/NanoVDB.h>
#include <nanovdb/io/IO.h>
#include <nanovdb/tools/GridChecksum.h>
#include <nanovdb/tools/GridValidator.h>
#include <cstdio>
#include <fstream>
#include <vector>
int main(int argc, char** argv) {
  auto handles = nanovdb::io::readGrids(argv[1]);
  std::ifstream rows(argv[2]);  // grid row i j k value
  long checked = 0, wrong = 0;
  int b, r, i, j, k; float v;
  std::vector<const nanovdb::NanoGrid<nanovdb::ValueOnIndex>*> grids;
  for (auto& h : handles) for (uint32_t n = 0; n < h.gridCount(); ++n) {
    auto* g = h.grid<nanovdb::ValueOnIndex>(n);
    printf("grid '%s': OnIndex %d, checksum %d, validator (full) %d\n", g ? g->gridName() : "?", g != nullptr,
           g ? int(nanovdb::tools::validateChecksum(g)) : 0, g ? int(nanovdb::tools::isValid(g, nanovdb::CheckMode::Full, true)) : 0);
    grids.push_back(g);
  }
  while (rows >> b >> r >> i >> j >> k >> v) {
    auto* g = grids[b];
    const uint64_t idx = g->getAccessor().getValue(nanovdb::Coord(i, j, k));
    const float* ch = g->blindMetaData(0).template getBlindData<float>();
    ++checked;
    if (idx != uint64_t(r) + 1 || !ch || ch[idx] != v) ++wrong;
  }
  printf("NanoVDB %d.%d.%d read %zu grids; voxels checked %ld, wrong %ld\n", NANOVDB_MAJOR_VERSION_NUMBER, NANOVDB_MINOR_VERSION_NUMBER, NANOVDB_PATCH_VERSION_NUMBER, grids.size(), checked, wrong);
}
