#include <gtest/gtest.h>
#include "core/rng.h"
TEST(Rng, Deterministic) { aah::Rng a(1), b(1); EXPECT_EQ(a.next_u64(), b.next_u64()); }
