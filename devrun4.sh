#!/usr/bin/env bash
mkdir -p .deps/cutlass && tar xJf .deps/cutlass_include.tar.xz -C .deps/cutlass
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$(date +%s)
python -m pip install -q --no-build-isolation --no-deps -C build-dir=/tmp/b -C cmake.define.TILEGRID_CUTLASS_INCLUDE_DIR=$PWD/.deps/cutlass/include . > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s) - t0 )) s"
cd tests/python
timeout 150 python -m pytest -q -rs grid/test_volume_render.py distributed fusion/test_linear_cross_entropy.py -k "cuda or gpu" > $OUT/pytest.log 2>&1; echo "pytest gpu rc=$?"; tail -3 $OUT/pytest.log
for tool in memcheck racecheck; do timeout 80 compute-sanitizer --tool $tool --error-exitcode 9 python -m pytest -q -x grid/test_volume_render.py -k "cuda or gpu" > $OUT/sanitizer_$tool.log 2>&1; echo "$tool volume_render rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/sanitizer_$tool.log | tail -1)"; done
cd ../..
timeout 120 python bench/bench_grid_geometry.py --out $OUT/bench_grid_geometry.json > $OUT/bench_grid_geometry.log 2>&1; echo "geometry rc=$?"; grep -E "volume_render|tsdf|marching|implicit" $OUT/bench_grid_geometry.log
timeout 200 python bench/bench_linear_cross_entropy.py --out $OUT/bench_linear_cross_entropy.json > $OUT/bench_lce.log 2>&1; echo "lce rc=$?"; tail -6 $OUT/bench_lce.log
