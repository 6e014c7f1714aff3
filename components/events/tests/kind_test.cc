#include "once/events/kind.h"

#include <gtest/gtest.h>

#include <sstream>

namespace once::events {
namespace {

TEST(KindTest, KernelKindsAreHeldWithoutTheirName) {
  Kind step = KernelKind::kStepCompleted;
  EXPECT_EQ(step.interned(), KernelKind::kStepCompleted);
  EXPECT_EQ(step.view(), "STEP_COMPLETED");
  EXPECT_TRUE(step.Is(KernelKind::kStepCompleted));
  EXPECT_FALSE(step.Is(KernelKind::kStepFailed));
  Kind app = "order.charged";
  EXPECT_FALSE(app.interned());
  EXPECT_EQ(app, "order.charged");
}

TEST(KindTest, KindsCompareByName) {
  Kind by_name = std::string("EXECUTION_RESUMED");  // e.g. an unstamped app event
  Kind kernel = KernelKind::kExecutionResumed;
  EXPECT_FALSE(by_name.interned());
  EXPECT_EQ(by_name, kernel);
  EXPECT_TRUE(by_name.Is(KernelKind::kExecutionResumed));
  EXPECT_EQ(kernel, std::string_view("EXECUTION_RESUMED"));
  EXPECT_EQ(kernel, std::string("EXECUTION_RESUMED"));
  EXPECT_FALSE(kernel == "EXECUTION_RESUMED2");
}

TEST(KindTest, StoredNamesOfKernelKindsAreInterned) {
  for (const auto& row : kKernelKinds) {
    Kind k = Kind::FromStored(std::string(row.name));
    EXPECT_EQ(k.interned(), row.kind) << row.name;
    EXPECT_EQ(k.view(), row.name);
  }
  Kind other = Kind::FromStored("EXECUTION_REWOUND");
  EXPECT_FALSE(other.interned());
  EXPECT_EQ(other, "EXECUTION_REWOUND");
}

TEST(KindTest, ReadsAsText) {
  Kind k = KernelKind::kExecutionSuspended;
  std::ostringstream os;
  os << k;
  EXPECT_EQ(os.str(), "EXECUTION_SUSPENDED");
  EXPECT_EQ("kind " + k, "kind EXECUTION_SUSPENDED");
  std::string_view view = k;
  EXPECT_EQ(view, "EXECUTION_SUSPENDED");
  EXPECT_EQ(k.str(), "EXECUTION_SUSPENDED");
  EXPECT_EQ(Kind().size(), 0u);
  EXPECT_TRUE(Kind().empty());
}

}  // namespace
}  // namespace once::events
