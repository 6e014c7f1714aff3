#include "once/store/id_table.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace once::store::internal {
namespace {

// A hash that gives every id one of four home slots at the end of the array
// (whatever its size): runs of full slots wrap past the end, and every
// lookup meets entries whose whole hash equals its own.
struct CrowdingHash {
  uint64_t operator()(std::string_view id) const {
    return ~uint64_t{0} - id.size() % 4 - id.back() % 2;
  }
};

// Every entry the table holds, by id (each visited once).
template <class Table>
std::map<std::string, int64_t> Contents(const Table& table) {
  std::map<std::string, int64_t> out;
  for (const auto& [id, value] : table) {
    EXPECT_TRUE(out.emplace(id, value).second) << "visited twice: " << id;
  }
  return out;
}

// Random inserts, overwrites, lookups and erases over a small set of ids
// (so that runs of full slots wrap past the end of the array and erases
// shift them back), checked against std::map after every step. Seeds replay.
template <class Table>
void MatchesAMap(std::initializer_list<uint32_t> seeds) {
  for (uint32_t seed : seeds) {
    std::mt19937 rng(seed);
    Table table;
    std::map<std::string, int64_t> model;
    const int universe = seed == 20261205u ? 5000 : 40;  // crowded: 40 share four homes
    for (int step = 0; step < 40000; ++step) {
      const std::string id = "exec-" + std::to_string(rng() % universe);
      switch (rng() % 4) {
        case 0: {  // try_emplace: inserts only an absent id
          auto [it, added] = table.try_emplace(id, step);
          auto [mit, madded] = model.try_emplace(id, step);
          ASSERT_EQ(added, madded) << "seed " << seed << " step " << step;
          ASSERT_EQ(it->first, id);
          ASSERT_EQ(it->second, mit->second);
          break;
        }
        case 1: {  // insert_or_assign: overwrites
          auto [it, added] = table.insert_or_assign(id, -step);
          auto [mit, madded] = model.insert_or_assign(id, -step);
          ASSERT_EQ(added, madded);
          ASSERT_EQ(it->second, -step);
          break;
        }
        default: {  // find, and half the time erase what was found
          auto it = table.find(id);
          auto mit = model.find(id);
          ASSERT_EQ(it == table.end(), mit == model.end()) << "seed " << seed << " step " << step;
          if (it == table.end()) break;
          ASSERT_EQ(it->second, mit->second);
          if (rng() % 2 == 0) {
            table.erase(it);
            model.erase(mit);
          }
          break;
        }
      }
      ASSERT_EQ(table.size(), model.size());
      if (step % 997 == 0) {
        ASSERT_EQ(Contents(table), model) << "seed " << seed;
      }
    }
    // Every id of the universe answers as the model does, then the table
    // empties by erases alone.
    for (int k = 0; k < universe; ++k) {
      const std::string id = "exec-" + std::to_string(k);
      ASSERT_EQ(table.find(id) == table.end(), !model.contains(id)) << id;
    }
    for (const auto& [id, value] : model) table.erase(table.find(id));
    EXPECT_TRUE(table.empty());
    EXPECT_EQ(table.begin(), table.end());
  }
}

TEST(IdTableTest, MatchesAMapUnderRandomOperations) {
  MatchesAMap<IdTable<int64_t>>({1u, 2u, 3u, 20261205u});
}

TEST(IdTableTest, MatchesAMapWhenIdsCrowdTheEndOfTheArray) {
  MatchesAMap<IdTable<int64_t, CrowdingHash>>({4u, 5u});
}

// Entries never move: a reference to an entry, and a view of its id, stay
// valid while the table grows and other entries come and go.
TEST(IdTableTest, EntriesStayWhereTheyAreWhileTheTableGrows) {
  IdTable<int64_t> table;
  std::vector<std::pair<const std::string*, int64_t*>> kept;
  size_t erased = 0;
  for (int i = 0; i < 100000; ++i) {
    auto [it, added] = table.try_emplace("run-" + std::to_string(i), i);
    ASSERT_TRUE(added);
    if (i % 1000 == 0) {
      kept.emplace_back(&it->first, &it->second);
    } else if (i % 3 == 1) {
      table.erase(table.find("run-" + std::to_string(i)));
      ++erased;
    }
  }
  for (size_t k = 0; k < kept.size(); ++k) {
    const int64_t i = static_cast<int64_t>(k) * 1000;
    EXPECT_EQ(*kept[k].first, "run-" + std::to_string(i));
    EXPECT_EQ(*kept[k].second, i);
    EXPECT_EQ(&table.find(*kept[k].first)->second, kept[k].second);
  }
  EXPECT_EQ(table.size(), 100000u - erased);
}

// try_emplace moves from the id only when it inserts it.
TEST(IdTableTest, TryEmplaceTakesTheIdOnlyWhenItInserts) {
  IdTable<std::string> table;
  std::string id(40, 'x');  // longer than the short-string buffer
  ASSERT_TRUE(table.try_emplace(std::string(id), "first").second);
  std::string again = id;
  auto [it, added] = table.try_emplace(std::move(again), "second");
  EXPECT_FALSE(added);
  EXPECT_EQ(again, id);  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_EQ(it->second, "first");
}

TEST(IdTableTest, AnEmptyTableFindsNothing) {
  IdTable<int64_t> table;
  EXPECT_EQ(table.find("anything"), table.end());
  EXPECT_EQ(table.begin(), table.end());
  table.try_emplace("a", 1);
  table.erase(table.find("a"));
  EXPECT_EQ(table.find("a"), table.end());
  table.clear();
  EXPECT_EQ(table.find("a"), table.end());
}

}  // namespace
}  // namespace once::store::internal
