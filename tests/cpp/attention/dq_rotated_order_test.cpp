// The rotated dQ order of deterministic=True (attention/common/dq_rotated_order.h): its closed
// form of a key tile's turn equals counting the key tiles that reach the query tile first, every
// key tile visits every query tile once, and the turns at a query tile are 0 .. N - 1.
#include "attention/common/dq_rotated_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace tilegrid::attention {
namespace {

TEST(RotatedDqOrder, TurnsAreTheOrderOfArrival) {
  for (int key_tiles : {1, 2, 3, 5, 16, 64, 128, 131})
    for (int query_tiles : {1, 2, 3, 7, 32, 256, 300}) {
      const RotatedDqOrder order{key_tiles, query_tiles};
      // step[n][m]: the step at which key tile n reaches query tile m, by walking its steps.
      std::vector<std::vector<int>> step(key_tiles, std::vector<int>(query_tiles, -1));
      for (int n = 0; n < key_tiles; ++n)
        for (int t = 0; t < query_tiles; ++t) {
          const int m = order.tile_at(n, t);
          ASSERT_TRUE(m >= 0 && m < query_tiles && step[n][m] < 0)
              << "key tile " << n << " visits query tile " << m << " twice or out of range";
          step[n][m] = t;
        }
      for (int m = 0; m < query_tiles; ++m) {
        std::vector<int> turns;
        for (int n = 0; n < key_tiles; ++n) {
          int before = 0;  // key tiles that reach m at an earlier step, or at the same one first
          for (int other = 0; other < key_tiles; ++other)
            before += step[other][m] < step[n][m] || (step[other][m] == step[n][m] && other < n);
          ASSERT_EQ(order.turn(n, m), before)
              << "N " << key_tiles << " M " << query_tiles << " n " << n << " m " << m;
          turns.push_back(before);
        }
        std::sort(turns.begin(), turns.end());
        for (int i = 0; i < key_tiles; ++i) ASSERT_EQ(turns[i], i);
      }
    }
}

TEST(RotatedDqOrder, KeyTilesStartSpreadOverTheQueryTiles) {
  const RotatedDqOrder order{128, 256};  // 16k tokens: 128-key and 64-query tiles
  for (int n = 0; n < 128; ++n) EXPECT_EQ(order.rotation(n), 2 * n);
  EXPECT_FALSE(RotatedDqOrder{}.active());
  EXPECT_TRUE(order.active());
}

}  // namespace
}  // namespace tilegrid::attention
