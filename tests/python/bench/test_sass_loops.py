"""bench/sass_loops.py on a small hand-written cuobjdump page (no GPU, no CUDA toolkit)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import sass_loops  # noqa: E402

# Two kernels: the first has an outer loop (0x10..0x90) around an inner one (0x30..0x70)
# that issues the HGMMA, and after its end a spin-wait block whose branch back (0xd0 -> 0x40)
# spans two HGMMAs but is no loop; the second has a loop without HGMMA only.
KERNEL = ("_ZN8tilegrid9attention4sm9021flash_fwd_sm90_kernelINS1_10Sm90TraitsIN7cutlass"
          "10bfloat16_tELi128ELb1ELb0ELi2ELi128ELi1EEEEEvNS1_12KernelParamsIT_EE")
SASS = f"""
\t\tFunction : {KERNEL}
        /*0000*/                   S2R R0, SR_TID.X ;                 /* 0x0 */
        /*0010*/                   LDL R1, [R1] ;                     /* 0x0 */
        /*0020*/                   BSSY B0, 0x60 ;                    /* 0x0 */
        /*0030*/                   S2R R2, SR_TID.X ;                 /* 0x0 */
        /*0040*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;  /* 0x0 */
        /*0050*/                   LDL R3, [R1+0x4] ;                 /* 0x0 */
        /*0060*/                   BSYNC B0 ;                         /* 0x0 */
        /*0070*/               @!P0 BRA 0x30 ;                        /* 0x0 */
        /*0080*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24 ;  /* 0x0 */
        /*0090*/               @P1 BRA 0x10 ;                         /* 0x0 */
        /*00a0*/                   EXIT ;                             /* 0x0 */
        /*00b0*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R1], R2 ;  /* 0x0 */
        /*00c0*/               @!P0 BRA 0xb0 ;                        /* 0x0 */
        /*00d0*/                   BRA 0x40 ;                         /* 0x0 */
\t\tFunction : other_kernel
        /*0000*/                   IADD3 R0, R0, 0x1, RZ ;            /* 0x0 */
        /*0010*/               @P0 BRA 0x0 ;                          /* 0x0 */
        /*0020*/                   EXIT ;                             /* 0x0 */
"""


def test_innermost_wgmma_loop_and_its_contents():
    table = {r["kernel"]: r for r in sass_loops.rows(SASS)}
    attention = table["10bfloat16_tELi128ELb1ELb0ELi2ELi128ELi1"]
    assert attention["instructions"] == 14
    assert attention["LDL"] == 2
    # The inner loop 0x30..0x70: S2R, HGMMA, LDL, BSYNC, BRA (the BSSY at 0x20 is outside).
    assert attention["loop"] == 5
    assert attention["loop HGMMA"] == 1
    assert attention["loop LDL"] == 1
    assert attention["loop S2R"] == 1
    assert attention["loop BSSY"] == 0
    first_kernel = next(iter(sass_loops.kernels(SASS).values()))
    assert sass_loops.is_wait_return(first_kernel, 13)  # BRA 0x40 after the try-wait
    assert not sass_loops.is_wait_return(first_kernel, 7)  # the inner loop's branch
    other = table["other_kernel"]
    assert other["instructions"] == 3
    assert other["loop"] == 0 and other["loop HGMMA"] == 0


def test_filter_and_predicated_opcodes():
    assert [r["kernel"] for r in sass_loops.rows(SASS, "other")] == ["other_kernel"]
    assert sass_loops.opcode("@!P0 BRA 0x30") == "BRA"
    assert sass_loops.opcode("HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24") == \
        "HGMMA.64x128x16.F32.BF16"
