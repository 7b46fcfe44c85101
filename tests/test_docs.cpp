// The reference pages generated from the code: docs/config.md and docs/regimes.md must equal what the binary prints
// from its key and regime tables, so that no table of names is copied by hand.
#include <gtest/gtest.h>

#include <string>

#include "core/process.h"
#include "core/files.h"

namespace aah {
namespace {

std::string aah_output(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"env", "OMP_NUM_THREADS=1", AAH_BINARY};  // no busy-core line
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out;
  EXPECT_EQ(process_run(argv, {.output = &out}), 0) << out;
  return out;
}

void expect_committed(const std::string& doc, const std::vector<std::string>& args) {
  const std::string path = std::string(AAH_SOURCE_DIR) + "/" + doc;
  ASSERT_TRUE(path_exists(path)) << doc << " is missing: aah --help-... --markdown > " << doc;
  const std::string printed = aah_output(args);
  EXPECT_EQ(read_file(path), printed) << doc << " differs from what the binary prints: regenerate it with "
                                      << "build/release/aah " << args[0] << " --markdown > " << doc;
}

TEST(Docs, ConfigReferenceIsGeneratedFromTheKeyTable) {
  expect_committed("docs/config.md", {"--help-config", "--markdown"});
  const std::string md = aah_output({"--help-config", "--markdown"});
  for (const char* key : {"`hidden_size`", "`train.lr`", "`aah.coverage_tail`", "`aah.regime`"})
    EXPECT_NE(md.find(key), std::string::npos) << key;
}

TEST(Docs, RegimeReferenceIsGeneratedFromTheRegimeTable) {
  expect_committed("docs/regimes.md", {"--help-regimes", "--markdown"});
  const std::string md = aah_output({"--help-regimes", "--markdown"});
  for (const char* name : {"`full`", "`full_adaptive`", "`coverage_budget_P`", "`shuffle_post_select`"})
    EXPECT_NE(md.find(name), std::string::npos) << name;
}

}  // namespace
}  // namespace aah
