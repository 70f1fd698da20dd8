// The mask's two directions agree with each other and with the definition, for every window
// shape and both orders of seqlen_q and seqlen_k.
#include "attention/common/mask.h"

#include <gtest/gtest.h>

namespace tilegrid::attention {
namespace {

TEST(AttentionMask, QueriesOfAKeyInvertKeysOfAQuery) {
  const int64_t windows[][2] = {{-1, -1}, {-1, 0}, {3, 0}, {0, 0}, {2, 5}, {-1, 2}, {4, -1}};
  for (int64_t sq : {1, 5, 13})
    for (int64_t sk : {1, 5, 13})
      for (const auto& w : windows) {
        const Mask mask{sq, sk, w[0], w[1]};
        for (int64_t i = 0; i < sq; ++i)
          for (int64_t j = 0; j < sk; ++j) {
            const int64_t diagonal = i + sk - sq;
            const bool expected =
                (w[0] < 0 || j >= diagonal - w[0]) && (w[1] < 0 || j <= diagonal + w[1]);
            ASSERT_EQ(mask.sees(i, j), expected) << sq << " " << sk << " " << i << " " << j;
            ASSERT_EQ(mask.queries_of_key(j).contains(i), expected)
                << sq << " " << sk << " w " << w[0] << "," << w[1] << " i " << i << " j " << j;
          }
      }
}

// The deterministic backward's turn at a query tile counts the key tiles up to the last one
// that a query of the tile sees: the closed form against the largest key tile over every
// query of the tile and every key it sees.
TEST(AttentionMask, LastKeyTileOfAQueryTileIsTheLargestSeen) {
  const int64_t windows[][2] = {{-1, -1}, {-1, 0}, {3, 0}, {0, 0}, {2, 5}, {-1, 2}, {4, -1}};
  for (int64_t sq : {1, 5, 13, 40})
    for (int64_t sk : {1, 5, 13, 40})
      for (const auto& w : windows)
        for (int64_t bm : {1, 4, 8})
          for (int64_t bn : {1, 3, 8}) {
            const Mask mask{sq, sk, w[0], w[1]};
            for (int64_t m = 0; m * bm < sq; ++m) {
              int64_t expected = -1;
              for (int64_t i = m * bm; i < (m + 1) * bm && i < sq; ++i)
                for (int64_t j = 0; j < sk; ++j)
                  if (mask.sees(i, j) && j / bn > expected) expected = j / bn;
              ASSERT_EQ(mask.last_key_tile_of_query_tile(m, bm, bn), expected)
                  << sq << " " << sk << " w " << w[0] << "," << w[1] << " bm " << bm << " bn "
                  << bn << " m " << m;
            }
          }
}

}  // namespace
}  // namespace tilegrid::attention
