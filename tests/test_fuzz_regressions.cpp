// Regression tests of bugs found by fuzzing the readers (fuzz/, scripts/fuzz.sh) and by the ASan/UBSan suite
// (scripts/sanitize.sh), each with its input reduced; plus the in-memory entry points the fuzz targets use.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "helpers.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/shard.h"
#include "model/config.h"
#include "model/weights.h"

using namespace aah;
using aah::test::error_of;

namespace {

std::string has(const std::string& msg, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    if (msg.find(p) == std::string::npos) return "missing '" + p + "' in: " + msg;
  return "";
}

std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; i++) out[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace

// A number too large for a double made nlohmann throw out_of_range (406), which only parse_error was caught for:
// an uncaught exception instead of an error naming the file.
TEST(FuzzRegression, JsonNumberOverflowNamesTheFile) {
  EXPECT_EQ(has(error_of([] { parse_json("{\"a\": 1e400}", "c.json"); }), {"[json] c.json: ", "1e400"}), "");
  EXPECT_EQ(has(error_of([] { parse_json("[-1e999]", "c.json"); }), {"[json] c.json: "}), "");
  const std::string st = safetensors_bytes(R"({"x":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}})", "abcd");
  EXPECT_EQ(has(error_of([&] { SafetensorsReader r(ByteSource::memory(st, "m.safetensors", "[safetensors]")); }),
                {"[safetensors] m.safetensors: header is not valid JSON"}),
            "");
  Config c;  // --set values that are not JSON numbers become strings, and then type errors
  EXPECT_EQ(has(error_of([&] { config_set(c, "train.lr=1e400"); }), {"'train.lr'", "a number"}), "");
}

// Deeply nested JSON overflowed the stack of recursive code (dump() in error messages, copies).
TEST(FuzzRegression, DeepJsonNestingIsAnError) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(has(error_of([&] { parse_json(deep, "d.json"); }), {"[json] d.json: nested deeper than 512"}), "");
  const std::string ok = std::string(500, '[') + std::string(500, ']');
  EXPECT_NO_THROW(parse_json(ok, "d.json"));
  EXPECT_NO_THROW(parse_json(R"({"s": "[[[[[[[[[[\"[[[[[[[["})", "d.json"));  // brackets in strings do not count
  Config c;
  EXPECT_EQ(has(error_of([&] { config_set(c, "train.lr=" + deep); }), {"'train.lr'"}), "");
}

// A float outside int range was converted to int (undefined behaviour, UBSan: float-cast-overflow), and integers
// outside 32-bit range wrapped when read into int fields and controller knobs.
TEST(FuzzRegression, ConfigIntegersOutOfRange) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"hidden_size": 1e10})", "'hidden_size'"},
      {R"({"hidden_size": -3e9})", "'hidden_size'"},
      {R"({"hidden_size": 4294967296})", "'hidden_size'"},
      {R"({"train": {"seed": 1e19}})", "'train.seed'"},
      {R"({"train": {"seed": 18446744073709551615}})", "'train.seed'"},
      {R"({"train": {"checkpoint_steps": [4294967297]}})", "'train.checkpoint_steps'"},
      {R"({"train": {"checkpoint_steps": 1e12}})", "'train.checkpoint_steps'"},
      {R"({"aah": {"control_interval": 4294967301}})", "'aah.control_interval'"},
      {R"({"aah": {"windows": [8, 16, 4294967328]}})", "'aah.windows'"},
  };
  for (const auto& tc : cases) {
    const std::string &text = tc.first, &key = tc.second;
    Config c;
    EXPECT_EQ(has(error_of([&] { config_apply_json(c, parse_json(text, "c.json"), "c.json"); }), {"c.json", key}), "")
        << text;
  }
  Config c;  // in range, integral floats are fine
  config_apply_json(c, parse_json(R"({"hidden_size": 64.0, "train": {"seed": -9007199254740992.0}})", "c.json"),
                    "c.json");
  EXPECT_EQ(c.model.hidden_size, 64);
  EXPECT_EQ(c.train.seed, -9007199254740992LL);
  config_set(c, "train.seed=9223372036854775807");
  EXPECT_EQ(c.train.seed, INT64_MAX);
  EXPECT_EQ(has(error_of([&] { config_set(c, "train.seed=9223372036854775808"); }), {"'train.seed'"}), "");
  EXPECT_EQ(has(error_of([&] { config_set(c, "aah.fixed_window=-2147483649"); }), {"'aah.fixed_window'"}), "");
}

// The readers take bytes in memory (what the fuzz targets feed them) and give the same results as from a file.
TEST(FuzzRegression, InMemoryReadersMatchFiles) {
  const std::string data = "0123456789abcdef";
  const std::string st = safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", data);
  SafetensorsReader r(ByteSource::memory(st, "mem.safetensors", "[safetensors]"));
  ASSERT_EQ(r.tensors().size(), 1u);
  EXPECT_EQ(r.path(), "mem.safetensors");
  std::string back(16, '\0');
  r.read_raw("x", "F32", back.data(), {2, 2});
  EXPECT_EQ(back, data);
  EXPECT_EQ(has(error_of([&] { r.read_raw("y", "F32", back.data(), {}); }), {"[safetensors] mem.safetensors: tensor 'y'"}),
            "");
  // Reads past the end of a source are errors, not overreads.
  const ByteSource src = ByteSource::memory("abc", "s.bin", "[shard]");
  char buf[8];
  EXPECT_EQ(has(error_of([&] { src.read(buf, 4, 0); }), {"[shard] s.bin: ", "past the end"}), "");
  EXPECT_EQ(has(error_of([&] { src.read(buf, 1, UINT64_MAX); }), {"[shard] s.bin: "}), "");
  src.read(buf, 3, 0);
  src.read(buf, 0, 3);
  EXPECT_EQ(has(error_of([&] { shard_read(ByteSource::memory(std::string(1023, '\0'), "t.bin", "[shard]")); }),
                {"[shard] t.bin: file is 1023 bytes"}),
            "");
}

// weights_index_shards: the index.json parser on its own.
TEST(FuzzRegression, WeightsIndexRejectsHostileFileNames) {
  const std::vector<std::string> names = {"a", "b"};
  auto shards = weights_index_shards(parse_json(R"({"weight_map": {"a": "s1", "b": "s2", "c": "s1"}})", "i.json"),
                                     names, "i.json");
  EXPECT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards["s1"], std::vector<std::string>{"a"});
  for (const char* file : {"\"\"", "\".\"", "\"..\"", "\"../x\"", "\"/etc/passwd\"", "\"a\\u0000b\"", "3"}) {
    const std::string text = std::string(R"({"weight_map": {"a": "s1", "b": )") + file + "}}";
    EXPECT_EQ(has(error_of([&] { weights_index_shards(parse_json(text, "i.json"), names, "i.json"); }),
                  {"[weights] i.json: weight_map['b']"}),
              "")
        << file;
  }
  EXPECT_EQ(has(error_of([&] { weights_index_shards(parse_json("[]", "i.json"), names, "i.json"); }), {"i.json"}), "");
  EXPECT_EQ(has(error_of([&] { weights_index_shards(parse_json(R"({"weight_map": 1})", "i.json"), names, "i.json"); }),
                {"weight_map"}),
            "");
}

// fuzz_config: "--set hidden_size=\xad" made the error message's dump() of the value throw nlohmann type_error 316
// (invalid UTF-8) instead of an aah::Error; a string field could also hold bytes that config.json cannot store.
TEST(FuzzRegression, ConfigSetValueMustBeUtf8) {
  Config c;
  EXPECT_EQ(has(error_of([&] { config_set(c, "hidden_size=\xad"); }), {"[config] --set", "UTF-8"}), "");
  EXPECT_EQ(has(error_of([&] { config_set(c, "aah.attention=\xff\xfe"); }), {"[config] --set", "UTF-8"}), "");
  EXPECT_EQ(has(error_of([&] { config_set(c, "aah.tau=\xc3"); }), {"[config] --set", "UTF-8"}), "");
  config_set(c, "aah.topology=freeze");  // valid text is still fine
}
