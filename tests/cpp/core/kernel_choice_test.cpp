// The kernel choice (tilegrid/core/kernel_choice.h) on any machine: each family's values from
// its environment variable, the override, and the Hopper predicate where no GPU runs them.
#include "tilegrid/core/kernel_choice.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"
#include "tilegrid/attention/attention.h"
#include "tilegrid/core/build_info.h"
#include "tilegrid/core/error.h"

namespace tilegrid {
namespace {

constexpr KernelFamily kFamilies[] = {KernelFamily::Attention, KernelFamily::AttentionBackward,
                                      KernelFamily::Gemm, KernelFamily::SparseConv};
constexpr KernelPath kPaths[] = {KernelPath::Auto, KernelPath::Hopper, KernelPath::Portable,
                                 KernelPath::Simt};

// Sets an environment variable (or unsets it, given nullopt) for a scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    apply(value);
  }
  ~ScopedEnv() { apply(old_); }

 private:
  void apply(const std::optional<std::string>& value) {
    if (value)
      setenv(name_, value->c_str(), 1);
    else
      unsetenv(name_);
  }
  const char* name_;
  std::optional<std::string> old_;
};

// Restores a family's request however the test ends.
class ScopedRequest {
 public:
  explicit ScopedRequest(KernelFamily family)
      : family_(family), previous_(requested_kernel(family)) {}
  ~ScopedRequest() { set_kernel_choice(family_, previous_); }

 private:
  KernelFamily family_;
  KernelPath previous_;
};

TEST(KernelChoice, EachFamilyTakesTheValuesOfItsVariable) {
  struct Case {
    KernelFamily family;
    const char* variable;
    std::vector<std::pair<const char*, KernelPath>> values;
  };
  const Case cases[] = {
      {KernelFamily::Attention,
       "TILEGRID_ATTENTION_KERNEL",
       {{"auto", KernelPath::Auto},
        {"sm90", KernelPath::Hopper},
        {"portable", KernelPath::Portable}}},
      {KernelFamily::AttentionBackward,
       "TILEGRID_ATTENTION_BACKWARD",
       {{"auto", KernelPath::Auto},
        {"portable", KernelPath::Portable},
        {"simt", KernelPath::Simt}}},
      {KernelFamily::SparseConv,
       "TILEGRID_SPARSE_CONV_KERNEL",
       {{"auto", KernelPath::Auto}, {"mma", KernelPath::Portable}, {"simt", KernelPath::Simt}}},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(kernel_environment_variable(c.family), c.variable);
    for (const auto& [value, path] : c.values) {
      ScopedEnv env(c.variable, value);
      EXPECT_EQ(kernel_path_from_environment(c.family), path) << c.variable << "=" << value;
      EXPECT_EQ(kernel_path_name(c.family, path), value);
    }
    for (const std::optional<std::string>& unset : {std::optional<std::string>{}, {""}}) {
      ScopedEnv env(c.variable, unset);
      EXPECT_EQ(kernel_path_from_environment(c.family), KernelPath::Auto) << c.variable;
    }
  }
}

TEST(KernelChoice, GemmHasNoVariableAndStartsAtAuto) {
  EXPECT_EQ(kernel_environment_variable(KernelFamily::Gemm), "");
  EXPECT_EQ(kernel_path_from_environment(KernelFamily::Gemm), KernelPath::Auto);
  EXPECT_EQ(parse_kernel_path(KernelFamily::Gemm, "sm90", "gemm"), KernelPath::Hopper);
  EXPECT_EQ(parse_kernel_path(KernelFamily::Gemm, "portable", "gemm"), KernelPath::Portable);
}

TEST(KernelChoice, BadValuesAreValueErrorsThatNameTheVariableAndItsValues) {
  {
    ScopedEnv env("TILEGRID_ATTENTION_KERNEL", "hopper");
    EXPECT_THROW(kernel_path_from_environment(KernelFamily::Attention), ValueError);
    EXPECT_EQ(testing::error_message([] { kernel_path_from_environment(KernelFamily::Attention); }),
              "TILEGRID_ATTENTION_KERNEL must be auto, sm90 or portable, got 'hopper'");
  }
  {
    ScopedEnv env("TILEGRID_SPARSE_CONV_KERNEL", "sm90");
    EXPECT_EQ(
        testing::error_message([] { kernel_path_from_environment(KernelFamily::SparseConv); }),
        "TILEGRID_SPARSE_CONV_KERNEL must be auto, mma or simt, got 'sm90'");
  }
  {
    ScopedEnv env("TILEGRID_ATTENTION_BACKWARD", "SIMT");
    EXPECT_EQ(testing::error_message(
                  [] { kernel_path_from_environment(KernelFamily::AttentionBackward); }),
              "TILEGRID_ATTENTION_BACKWARD must be auto, portable or simt, got 'SIMT'");
  }
  EXPECT_EQ(testing::error_message([] { parse_kernel_family("conv"); }),
            "kernel family must be attention, attention_backward, gemm or sparse_conv, got 'conv'");
}

TEST(KernelChoice, FamilyNamesRoundTrip) {
  for (KernelFamily f : kFamilies) EXPECT_EQ(parse_kernel_family(kernel_family_name(f)), f);
}

TEST(KernelChoice, TheOverrideWinsOverTheVariableUntilSetAgain) {
  ScopedRequest keep(KernelFamily::SparseConv);
  set_kernel_choice(KernelFamily::SparseConv, KernelPath::Simt);
  ScopedEnv env("TILEGRID_SPARSE_CONV_KERNEL", "mma");  // read once: a later value is not seen
  EXPECT_EQ(requested_kernel(KernelFamily::SparseConv), KernelPath::Simt);
  set_kernel_choice(KernelFamily::SparseConv, KernelPath::Auto);
  EXPECT_EQ(requested_kernel(KernelFamily::SparseConv), KernelPath::Auto);
}

TEST(KernelChoice, AFamilyTakesOnlyItsOwnPaths) {
  for (KernelFamily f : kFamilies) {
    ScopedRequest keep(f);
    for (KernelPath p : kPaths) {
      if (kernel_path_name(f, p).empty()) {
        EXPECT_THROW(set_kernel_choice(f, p), ValueError) << kernel_family_name(f);
      } else {
        set_kernel_choice(f, p);
        EXPECT_EQ(requested_kernel(f), p) << kernel_family_name(f);
      }
    }
  }
  EXPECT_EQ(testing::error_message(
                [] { set_kernel_choice(KernelFamily::SparseConv, KernelPath::Hopper); }),
            "set_kernel_choice: sparse_conv has no Hopper path (it takes auto, mma or simt)");
}

TEST(KernelChoice, HopperKernelsBuiltAsBuildInfoSays) {
  const std::vector<std::string>& kernels = build_info().kernels;
  auto has = [&](const std::string& k) {
    for (const std::string& s : kernels)
      if (s == k) return true;
    return false;
  };
  EXPECT_EQ(hopper_kernels_built(KernelFamily::Attention), has("attention (sm_90a)"));
  EXPECT_EQ(hopper_kernels_built(KernelFamily::AttentionBackward), has("attention (sm_90a)"));
  EXPECT_EQ(hopper_kernels_built(KernelFamily::Gemm),
            has("gemm and fused epilogue programs (sm_90a)"));
  EXPECT_EQ(hopper_kernels_built(KernelFamily::SparseConv), has("sparse convolution (sm_90a)"));
}

TEST(KernelChoice, NoDeviceRunsHopperKernelsWithoutAGpu) {
  for (KernelFamily f : kFamilies) {
    EXPECT_FALSE(hopper_kernels_run_on(f, -1));
    EXPECT_FALSE(hopper_kernels_run_on(f, 1 << 20));  // no such ordinal
    if (!testing::cuda_available()) {
      EXPECT_FALSE(hopper_kernels_run_on(f, 0));
    }
  }
}

TEST(KernelChoice, AttentionHeadDimsFollowThePredicate) {
  const std::vector<int> all = {64, 96, 128, 192, 256}, hopper = {64, 128, 256};
  EXPECT_EQ(attention::kernel_head_dims(Device::cpu()), all);
  EXPECT_EQ(attention::kernel_head_dims(Device::cuda(0)),
            hopper_kernels_run_on(KernelFamily::Attention, 0) ? hopper : all);
}

}  // namespace
}  // namespace tilegrid
