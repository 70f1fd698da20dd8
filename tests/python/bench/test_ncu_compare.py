"""bench/ncu_compare.py on small hand-written Nsight Compute pages (no GPU, no ncu)."""

import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import ncu_compare  # noqa: E402

RAW = '''# d128 s512 full tilegrid
"ID","Kernel Name","gpu__time_duration.sum","launch__grid_size"
"","","ns",""
"0","k","177,000","132"
# d128 s512 full FlashAttention-3
"ID","Kernel Name","gpu__time_duration.sum","launch__grid_size"
"","","ns",""
"0","k","131,000","132"
'''

SOURCE = '''# d128 s512 full tilegrid
"Kernel Name","k"
"Address","Source","Instructions Executed","stall_wait","stall_barrier","stall_wait (Not Issued)"
"0x10","HGMMA","1,000","30","10","7"
"0x20","FMUL","400","5","0","1"
"0x30","EXIT","100","0","5","0"
'''


def test_raw_pages_merge_and_scale(tmp_path):
    path = tmp_path / "ncu.csv"
    path.write_text(RAW)
    blocks = ncu_compare.load([str(path)])
    assert set(blocks) == {"d128 s512 full tilegrid", "d128 s512 full FlashAttention-3"}
    time = blocks["d128 s512 full tilegrid"]["gpu__time_duration.sum"]
    assert ncu_compare.number(time, "gpu__time_duration.sum") == "177"  # ns -> us
    # A later file's block with the same heading replaces the earlier one.
    later = tmp_path / "later.csv"
    first_block = RAW.split("# d128 s512 full FlashAttention-3")[0]
    later.write_text(first_block.replace("177,000", "150,000"))
    merged = ncu_compare.load([str(path), str(later)])
    assert merged["d128 s512 full tilegrid"]["gpu__time_duration.sum"] == "150,000"
    assert ncu_compare.number("", "x") == "-"


def test_source_phases_split_loop_from_rest(tmp_path, capsys):
    path = tmp_path / "src.csv.gz"
    with gzip.open(path, "wt") as file:
        file.write(SOURCE)
    ncu_compare.source_phases([str(path)])
    out = capsys.readouterr().out
    # 50 samples: the loop (executed >= 30% of the most) holds 45 (HGMMA 40 + FMUL 5), the
    # rest 5; the "Not Issued" column is not counted twice.
    assert "50 stall samples" in out
    assert "steady loop  90.0% of samples" in out
    assert "rest         10.0% of samples" in out
    assert "wait 70.0%" in out and "barrier 20.0%" in out
