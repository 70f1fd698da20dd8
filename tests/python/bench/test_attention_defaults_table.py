"""bench/attention_defaults_table.py on hand-made timings (no GPU): the fastest variant per
class, the current choice kept within the margin, runs merged into rows, and the committed
table parsed as the C++ reads it."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "bench"))
import attention_defaults_table as table  # noqa: E402
from attention_switch_variants import switch_expression  # noqa: E402


def row(head_dim, seqlen, causal, system, ms):
    mask = "causal" if causal else "full"
    return {"op": "forward", "problem": f"d{head_dim} s{seqlen} b1 h16 {mask}", "system": system,
            "median_ms": ms}


def test_fastest_per_class_merged_into_rows():
    results = [
        row(128, 512, False, "sm90 persistent", 1.0), row(128, 512, False, "sm90 ping-pong", 1.2),
        row(128, 1024, False, "sm90 persistent", 2.0), row(128, 1024, False, "sm90 ping-pong", 2.1),
        row(128, 2048, False, "sm90 persistent", 4.4), row(128, 2048, False, "sm90 ping-pong", 4.0),
        row(128, 16384, False, "sm90 ping-pong", 9.0),
        row(128, 16384, False, "sm90 wide-n+kv-multicast", 8.0),
        # 3wg runs at head dim 64 only: its row at 128 is not a candidate.
        row(128, 16384, False, "sm90 3wg", 1.0),
        # Not a variant of the table: ignored.
        row(128, 512, False, "FlashAttention-3", 0.1),
    ]
    chosen = table.fastest(results, {}, keep_within=0.01)
    assert table.rows_of(chosen) == [(128, False, 1024, 32), (128, False, 2048, 4),
                                     (128, False, 0, 144)]


def test_current_choice_kept_within_the_margin():
    current = {(64, True): [(0, 4)]}  # ping-pong everywhere
    results = [row(64, 512, True, "sm90 ping-pong", 1.005), row(64, 512, True, "sm90 plain", 1.0),
               row(64, 1024, True, "sm90 ping-pong", 2.1), row(64, 1024, True, "sm90 plain", 2.0)]
    chosen = table.fastest(results, current, keep_within=0.01)
    assert chosen == {(64, True): {512: 4, 1024: 0}}
    # A current choice the run did not time stays; kDirectStoreO (512) is never a default.
    current = {(64, True): [(0, 8 | 4)]}
    results.append(row(64, 512, True, "sm90 direct-store-o", 0.1))
    assert table.fastest(results, current, keep_within=0.01) == {(64, True): {512: 12, 1024: 12}}


def test_committed_table_parses_and_renders_back():
    with open(table.TABLE) as f:
        text = f.read()
    current = table.parse_table(text)
    assert set(current) == {(d, m) for d in (64, 128, 256) for m in (True, False)}
    for rows in current.values():
        bounds = [b for b, _ in rows]
        assert bounds[-1] == 0 and bounds[:-1] == sorted(bounds[:-1]) and 0 not in bounds[:-1]
    assert table.choice_in(current[(128, False)], 16384) == 16 | 128
    assert table.choice_in(current[(64, True)], 2048) == 32 | 64
    rows = [(d, m, b, bits) for (d, m), rs in current.items() for b, bits in rs]
    assert table.parse_table(table.render(rows, ["x.json"])) == current
    assert switch_expression(36) == "kPingPong | kPersistent"
