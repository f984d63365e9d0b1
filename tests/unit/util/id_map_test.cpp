#include "util/id_map.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <random>
#include <unordered_map>

namespace outboard {
namespace {

// The same random operations on IdMap and std::unordered_map must agree.
void agree_with_unordered_map(const std::function<uint64_t(std::mt19937_64&, uint64_t)>& next_id) {
  std::mt19937_64 rng(17);
  IdMap<uint64_t> map;
  std::unordered_map<uint64_t, uint64_t> ref;
  std::vector<uint64_t> live;
  uint64_t counter = 0;
  for (int step = 0; step < 200000; ++step) {
    unsigned op = rng() % 10;
    if (op < 5 || live.empty()) {
      uint64_t id = next_id(rng, counter++);
      uint64_t v = rng();
      auto [got, inserted] = map.emplace(id, v);
      auto [it, ref_inserted] = ref.emplace(id, v);
      ASSERT_EQ(inserted, ref_inserted) << id;
      ASSERT_EQ(*got, it->second);
      if (inserted) live.push_back(id);
    } else if (op < 9) {
      size_t k = rng() % live.size();
      uint64_t id = live[k];
      live[k] = live.back();
      live.pop_back();
      auto taken = map.take(id);
      ASSERT_TRUE(taken.has_value()) << id;
      ASSERT_EQ(*taken, ref.at(id));
      ref.erase(id);
      ASSERT_EQ(map.find(id), nullptr);
    } else {
      uint64_t id = live.empty() ? 0 : live[rng() % live.size()];
      const uint64_t* v = map.find(id);
      ASSERT_EQ(v != nullptr, ref.count(id) == 1);
      if (v) {
        ASSERT_EQ(*v, ref.at(id));
      }
    }
    ASSERT_EQ(map.size(), ref.size());
    // Keep the tables at the sizes the channel sees: tens to thousands.
    while (live.size() > 3000) {
      ASSERT_TRUE(map.take(live.back()).has_value());
      ref.erase(live.back());
      live.pop_back();
    }
  }
  size_t seen = 0;
  map.for_each([&](uint64_t id, uint64_t& v) {
    ++seen;
    EXPECT_EQ(v, ref.at(id));
  });
  EXPECT_EQ(seen, ref.size());
}

TEST(IdMap, AgreesWithUnorderedMapOnSequentialIds) {
  agree_with_unordered_map([](std::mt19937_64&, uint64_t n) { return n + 1; });
}

TEST(IdMap, AgreesWithUnorderedMapOnRandomAndRepeatedIds) {
  agree_with_unordered_map([](std::mt19937_64& rng, uint64_t) { return rng() % 5000; });
}

// Ids a peer might pick to collide: multiples of a large power of two.
TEST(IdMap, AgreesWithUnorderedMapOnStridedIds) {
  agree_with_unordered_map([](std::mt19937_64& rng, uint64_t) { return (rng() % 4096) << 40; });
}

TEST(IdMap, MovedFromMapIsEmptyAndValuesMoveOut) {
  IdMap<std::unique_ptr<int>> a;
  for (int i = 1; i <= 100; ++i) a.emplace(i, std::make_unique<int>(i));
  IdMap<std::unique_ptr<int>> b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.find(5), nullptr);
  a.emplace(5, std::make_unique<int>(-5));  // a moved-from map is usable
  EXPECT_EQ(**a.find(5), -5);
  ASSERT_EQ(b.size(), 100u);
  auto v = b.take(42);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(**v, 42);
  EXPECT_FALSE(b.take(42).has_value());
  b.clear();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.find(1), nullptr);
}

}  // namespace
}  // namespace outboard
