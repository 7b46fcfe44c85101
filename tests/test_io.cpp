// Tests of src/formats (safetensors), src/data (token shards) and src/core/files (atomic file writes).
#include <gtest/gtest.h>

#include "helpers.h"
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "formats/checksum.h"
#include "core/files.h"
#include "formats/safetensors.h"
#include "data/shard.h"

namespace fs = std::filesystem;
using namespace aah;

namespace {

// A fresh directory under /tmp per test, removed afterwards.
class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/aah_test_io_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string path(const std::string& name) const { return dir + "/" + name; }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    return names;
  }
  std::string dir;
};

void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

using aah::test::error_of;

#define EXPECT_ERROR_HAS(call, ...)                                          \
  do {                                                                       \
    std::string msg_ = error_of([&] { call; });                              \
    for (const std::string& part_ : std::vector<std::string>{__VA_ARGS__})   \
      EXPECT_NE(msg_.find(part_), std::string::npos) << "missing '" << part_ << "' in: " << msg_; \
  } while (0)

// A safetensors file from a literal header and data section (no padding).
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; i++) out[i] = char((n >> (8 * i)) & 0xff);
  return out + header + data;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

// ---------------------------------------------------------------------------------------------------- safetensors

class IoSafetensors : public IoTest {};

TEST_F(IoSafetensors, RoundTripF32) {
  std::vector<float> scalar = {3.5f}, vec = {1, -2, 3}, mat(6), cube(24), empty;
  for (int i = 0; i < 6; i++) mat[i] = 0.25f * i - 1;
  for (int i = 0; i < 24; i++) cube[i] = std::sin(float(i));
  SafetensorsWriter w;
  w.add_f32("scalar", scalar.data(), {});
  w.add_f32("vec", vec.data(), {3});
  w.add_f32("layer.0.mat", mat.data(), {2, 3});
  w.add_f32("cube", cube.data(), {2, 3, 4});
  w.add_f32("empty", empty.data(), {0, 5});
  w.set_metadata("format", "pt");
  w.set_metadata("step", "1200");
  std::string p = path("model.safetensors");
  w.write(p);

  // The data section starts 8-byte aligned.
  std::string raw = read_file(p);
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = (n << 8) | uint8_t(raw[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(raw.size(), 8 + n + 4 * (1 + 3 + 6 + 24));

  SafetensorsReader r(p);
  ASSERT_EQ(r.tensors().size(), 5u);
  std::vector<std::string> names;
  for (const auto& t : r.tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"scalar", "vec", "layer.0.mat", "cube", "empty"}));
  EXPECT_EQ(r.metadata().size(), 3u);  // ours, and the data checksum
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.metadata().at("step"), "1200");
  EXPECT_EQ(r.metadata().at("aah.checksum").substr(0, 7), "crc32c:");
  EXPECT_TRUE(r.has("cube"));
  EXPECT_FALSE(r.has("nope"));
  EXPECT_EQ(r.tensor("cube").shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(r.tensor("cube").numel(), 24);
  EXPECT_EQ(r.tensor("empty").numel(), 0);

  auto check = [&](const std::string& name, const std::vector<float>& want, const std::vector<int64_t>& shape) {
    std::vector<float> got(want.size() + 1, -7.0f);
    r.read_f32(name, got.data(), shape);
    for (size_t i = 0; i < want.size(); i++) EXPECT_EQ(got[i], want[i]) << name << "[" << i << "]";
    EXPECT_EQ(got.back(), -7.0f) << name << ": wrote past the end";
  };
  check("scalar", scalar, {});
  check("vec", vec, {3});
  check("layer.0.mat", mat, {2, 3});
  check("cube", cube, {2, 3, 4});
  check("empty", empty, {0, 5});
}

TEST_F(IoSafetensors, ReadsHandBuiltBf16F16F64I32) {
  std::vector<uint16_t> bf16 = {0x3F80, 0xC000, 0x3FC0, 0x0000};  // 1, -2, 1.5, 0
  // 1, 2^-24 (smallest subnormal), inf, -2, 0x3555 = (1 + 341/1024) / 4, -inf, 1023 * 2^-24, NaN
  std::vector<uint16_t> f16 = {0x3C00, 0x0001, 0x7C00, 0xC000, 0x3555, 0xFC00, 0x03FF, 0x7E00};
  std::vector<double> f64 = {0.25, -1e10};
  std::vector<int32_t> i32 = {7, -8, 9};
  std::string data = bytes_of(bf16) + bytes_of(f16) + bytes_of(f64) + bytes_of(i32);
  std::string header = R"({"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
                       R"("h":{"dtype":"F16","shape":[8],"data_offsets":[8,24]},)"
                       R"("d":{"dtype":"F64","shape":[2],"data_offsets":[24,40]},)"
                       R"("i":{"dtype":"I32","shape":[3],"data_offsets":[40,52]},)"
                       R"("__metadata__":{"k":"v"}})";
  std::string p = path("hand.safetensors");
  write_plain(p, safetensors_bytes(header, data));

  SafetensorsReader r(p);
  EXPECT_EQ(r.metadata().at("k"), "v");
  std::vector<float> b(4), h(8), d(2);
  r.read_f32("b", b.data(), {2, 2});
  EXPECT_EQ(b, (std::vector<float>{1.0f, -2.0f, 1.5f, 0.0f}));
  r.read_f32("h", h.data(), {8});
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[3], -2.0f);
  EXPECT_EQ(h[4], 0.333251953125f);
  EXPECT_EQ(h[5], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[6], 1023 * std::ldexp(1.0f, -24));
  EXPECT_TRUE(std::isnan(h[7]));
  r.read_f32("d", d.data(), {});
  EXPECT_EQ(d, (std::vector<float>{0.25f, -1e10f}));
  std::vector<int32_t> i(3);
  r.read_raw("i", "I32", i.data(), {3});
  EXPECT_EQ(i, i32);

  EXPECT_ERROR_HAS(r.read_f32("i", b.data(), {}), p, "tensor 'i'", "I32");
  EXPECT_ERROR_HAS(r.read_raw("i", "I64", i.data(), {}), p, "tensor 'i'", "dtype is I32, expected I64");
}

TEST(IoChecksum, Crc32cKnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of ones, ascending 0..31, descending 31..0
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; i++) up[i] = uint8_t(i), down[i] = uint8_t(31 - i);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(up.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down.data(), 32), 0x113FDB5Cu);
  // continuing over pieces of any length equals one pass
  std::string text = "The quick brown fox jumps over the lazy dog, twice: the quick brown fox jumps.";
  for (size_t cut = 0; cut <= text.size(); cut++)
    EXPECT_EQ(crc32c(text.data() + cut, text.size() - cut, crc32c(text.data(), cut)), crc32c(text.data(), text.size()));
  EXPECT_EQ(checksum_str(0xE3069283u), "crc32c:e3069283");
}

TEST(IoChecksum, Sha256KnownValues) {
  // FIPS 180-4 examples (NIST CSRC): "abc", the 448-bit message, one million 'a'; and the empty message.
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // the digest of parts is the digest of their concatenation, wherever the cuts fall
  const std::string text = "The quick brown fox jumps over the lazy dog, and once more: the quick brown fox jumps.";
  const auto whole = sha256({text});
  for (size_t cut = 0; cut <= text.size(); cut++)
    EXPECT_EQ(sha256({std::string_view(text).substr(0, cut), std::string_view(text).substr(cut)}), whole) << cut;
}

TEST_F(IoSafetensors, CorruptDataIsDetected) {
  std::vector<float> w(1000);
  for (int i = 0; i < 1000; i++) w[i] = 0.001f * i;
  SafetensorsWriter wr;
  wr.add_f32("w", w.data(), {1000});
  std::string p = path("w.safetensors");
  wr.write(p);
  std::string good = read_file(p);
  const std::string want = SafetensorsReader(p).metadata().at("aah.checksum");
  EXPECT_EQ(want, checksum_str(crc32c(w.data(), w.size() * 4)));

  std::string bad = good;
  bad[bad.size() - 1000] ^= 0x10;  // one bit of the data
  write_plain(p, bad);
  EXPECT_ERROR_HAS(SafetensorsReader r(p), "[safetensors] " + p + ": corrupt", "expected " + want, "got crc32c:");

  bad = good;
  size_t at = bad.find(want);
  bad.replace(at, want.size(), "crc32c:xyz00000");  // same length, so the header stays valid JSON
  write_plain(p, bad);
  EXPECT_ERROR_HAS(SafetensorsReader r(p), p, "corrupt header", "aah.checksum");

  // A file without the key (another tool's) loads unverified.
  write_plain(p, safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')));
  SafetensorsReader r(p);
  EXPECT_EQ(r.metadata().count("aah.checksum"), 0u);
}

TEST_F(IoSafetensors, WriterRefusesNonFiniteWhenAsked) {
  std::vector<float> a = {1, 2, 3}, b = {0, std::numeric_limits<float>::quiet_NaN(), 1};
  std::vector<double> c = {1, -std::numeric_limits<double>::infinity()};
  SafetensorsWriter w;
  w.add_f32("a", a.data(), {3});
  w.add_f32("b", b.data(), {3});
  std::string p = path("n.safetensors");
  w.write(p);  // allowed by default
  EXPECT_TRUE(file_exists(p));
  w.require_finite();
  std::string q = path("m.safetensors");
  EXPECT_ERROR_HAS(w.write(q), "[safetensors] " + q, "tensor 'b'", "non-finite", "element 1", "not written");
  EXPECT_FALSE(file_exists(q));
  SafetensorsWriter w2;
  w2.require_finite();
  w2.add_raw("c", "F64", c.data(), 16, {2});
  EXPECT_ERROR_HAS(w2.write(q), "tensor 'c'", "-inf");
  EXPECT_FALSE(file_exists(q));
}

TEST(IoConversions, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xC000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  // bf16 keeps 7 mantissa bits, so near 1 its spacing is 2^-7 and 2^-8 is a tie.
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);                                // tie -> even (down)
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);                            // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3F81);        // above the tie
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) - std::ldexp(1.0f, -20)), 0x3F80);        // below the tie
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);                          // overflows to inf
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  // NaN stays NaN, even one whose payload lives only in the low 16 bits.
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0xFF800001u)))));
  // Every finite bf16 value survives the round trip unchanged.
  for (uint32_t b = 0; b < 0x10000; b++) {
    float f = bf16_to_f32(uint16_t(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), b) << std::hex << b;
    }
  }
}

TEST(IoConversions, F16Values) {
  EXPECT_EQ(f16_to_f32(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_EQ(f16_to_f32(0x7BFF), 65504.0f);               // largest finite
  EXPECT_EQ(f16_to_f32(0x3800), 0.5f);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7C01)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xFE00)));
}

TEST_F(IoSafetensors, RejectsTruncatedFiles) {
  std::string p = path("bad.safetensors");
  write_plain(p, "abcd");
  EXPECT_ERROR_HAS(SafetensorsReader r(p), "[safetensors] " + p + ": ", "4 bytes", "too short");

  std::string good = safetensors_bytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'));
  write_plain(p, good.substr(0, 20));  // header length says more than is there
  EXPECT_ERROR_HAS(SafetensorsReader r(p), p, "header length", "beyond the end of the file");

  write_plain(p, good.substr(0, good.size() - 1));  // last data byte missing
  EXPECT_ERROR_HAS(SafetensorsReader r(p), p, "tensor 'x'", "beyond the data section");

  std::string huge(8, '\0');
  huge[3] = 0x10;  // 256 MiB header
  write_plain(p, huge + "{}");
  EXPECT_ERROR_HAS(SafetensorsReader r(p), p, "100 MiB");

  EXPECT_ERROR_HAS(SafetensorsReader r(path("missing.safetensors")), path("missing.safetensors"), "cannot open");
}

TEST_F(IoSafetensors, RejectsBadHeaders) {
  std::string p = path("bad.safetensors");
  auto expect_rejected = [&](const std::string& header, const std::string& data, std::vector<std::string> parts) {
    write_plain(p, safetensors_bytes(header, data));
    std::string msg = error_of([&] { SafetensorsReader r(p); });
    parts.push_back("[safetensors] " + p + ": ");
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << "missing '" << part << "' in: " << msg;
  };
  std::string d16(16, '\0');
  expect_rejected("{not json", d16, {"not valid JSON"});
  expect_rejected("[1, 2]", d16, {"not a JSON object"});
  expect_rejected(R"({"x":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", d16, {"tensor 'x'", "unknown dtype 'F8'"});
  expect_rejected(R"({"x":{"dtype":3,"shape":[2],"data_offsets":[0,8]}})", d16, {"tensor 'x'", "dtype"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d16,
                  {"tensor 'x'", "shape (3) of dtype F32 needs 12 bytes", "[0, 8]"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d16, {"tensor 'x'", "negative"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", d16, {"tensor 'x'", "not an integer"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", d16, {"tensor 'x'", "shape"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", d16,
                  {"tensor 'x'", "overflows"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d16, {"tensor 'x'", "begin after"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", d16, {"tensor 'x'", "data_offsets"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", d16,
                  {"tensor 'x'", "beyond the data section (16 bytes"});
  expect_rejected(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                  R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                  d16, {"tensor 'b'", "overlap tensor 'a'"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"n":1}})", d16,
                  {"__metadata__", "'n'", "not a string"});
  expect_rejected(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":[]})", d16,
                  {"__metadata__"});
}

TEST_F(IoSafetensors, RejectsWrongShapeAndMissingTensor) {
  std::vector<float> w(6, 1.0f);
  SafetensorsWriter wr;
  wr.add_f32("wq", w.data(), {2, 3});
  std::string p = path("w.safetensors");
  wr.write(p);
  SafetensorsReader r(p);
  std::vector<float> out(6);
  EXPECT_ERROR_HAS(r.read_f32("wq", out.data(), {3, 2}), "[safetensors] " + p + ": tensor 'wq' has shape (2, 3), expected (3, 2)");
  EXPECT_ERROR_HAS(r.read_f32("wk", out.data(), {}), p, "tensor 'wk'", "not in the file");
  EXPECT_ERROR_HAS(r.tensor("wk"), p, "tensor 'wk'");
}

TEST_F(IoSafetensors, WriterRejectsBadInput) {
  std::vector<float> w(4);
  SafetensorsWriter wr;
  wr.add_f32("a", w.data(), {4});
  EXPECT_ERROR_HAS(wr.add_f32("a", w.data(), {4}), "tensor 'a'", "twice");
  EXPECT_ERROR_HAS(wr.add_raw("b", "F32", w.data(), 12, {4}), "tensor 'b'", "12 bytes");
  EXPECT_ERROR_HAS(wr.add_raw("c", "Q4", w.data(), 4, {4}), "tensor 'c'", "unknown dtype");
  EXPECT_ERROR_HAS(wr.add_f32("__metadata__", w.data(), {4}), "__metadata__");
}

// ---------------------------------------------------------------------------------------------------- shards

class IoShard : public IoTest {};

TEST_F(IoShard, RoundTripTwoBytes) {
  std::vector<int32_t> tokens = {0, 1, 50256, 17, 65, 50000};
  std::string p = path("train.bin");
  shard_write(p, tokens, 50257);
  EXPECT_EQ(fs::file_size(p), kShardHeaderBytes + 2 * tokens.size());
  TokenShard s = shard_read(p);
  EXPECT_EQ(s.path, p);
  EXPECT_EQ(s.vocab_size, 50257u);
  EXPECT_EQ(s.tokens, tokens);

  // 65536 still fits in 2 bytes; so does an empty shard.
  shard_write(p, {65535, 0}, 65536);
  EXPECT_EQ(fs::file_size(p), kShardHeaderBytes + 4);
  EXPECT_EQ(shard_read(p).tokens, (std::vector<int32_t>{65535, 0}));
  shard_write(p, {}, 10);
  EXPECT_EQ(fs::file_size(p), kShardHeaderBytes);
  EXPECT_TRUE(shard_read(p).tokens.empty());
}

TEST_F(IoShard, RoundTripFourBytes) {
  std::vector<int32_t> tokens = {99999, 0, 70000, 65536, 3};
  std::string p = path("val.bin");
  shard_write(p, tokens, 100000);
  EXPECT_EQ(fs::file_size(p), kShardHeaderBytes + 4 * tokens.size());
  TokenShard s = shard_read(p);
  EXPECT_EQ(s.vocab_size, 100000u);
  EXPECT_EQ(s.tokens, tokens);
}

TEST_F(IoShard, RejectsCorruptShards) {
  std::string p = path("s.bin");
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  shard_write(p, tokens, 1000);
  const std::string good = read_file(p);
  auto with = [&](size_t offset, std::vector<uint8_t> bytes) {
    std::string s = good;
    for (size_t i = 0; i < bytes.size(); i++) s[offset + i] = char(bytes[i]);
    write_plain(p, s);
  };
  const std::string prefix = "[shard] " + p + ": ";

  with(0, {'X'});
  EXPECT_ERROR_HAS(shard_read(p), prefix, "bad magic");
  with(8, {2});
  EXPECT_ERROR_HAS(shard_read(p), prefix, "version", "is 2");
  with(12, {3});
  EXPECT_ERROR_HAS(shard_read(p), prefix, "bytes per token", "is 3");
  with(24, {0, 0, 0, 0});
  EXPECT_ERROR_HAS(shard_read(p), prefix, "vocab size", "is 0");
  with(500, {1});
  EXPECT_ERROR_HAS(shard_read(p), prefix, "reserved header byte 500");

  write_plain(p, good.substr(0, good.size() - 2));
  EXPECT_ERROR_HAS(shard_read(p), prefix, "truncated", "8 tokens", "14 bytes");
  write_plain(p, good + "abc");
  EXPECT_ERROR_HAS(shard_read(p), prefix, "3 trailing bytes");
  write_plain(p, good.substr(0, 100));
  EXPECT_ERROR_HAS(shard_read(p), prefix, "100 bytes", "shorter than the 1024-byte header");

  with(kShardHeaderBytes + 2 * 5, {0xE8, 0x03});  // token 5 = 1000 = vocab size
  EXPECT_ERROR_HAS(shard_read(p), prefix, "token 5 (byte offset 1034) is 1000", "vocab size 1000");

  EXPECT_ERROR_HAS(shard_read(path("none.bin")), path("none.bin"), "cannot open");
}

TEST_F(IoShard, WriterRejectsBadTokens) {
  std::string p = path("s.bin");
  EXPECT_ERROR_HAS(shard_write(p, {1, 2, 10}, 10), p, "token 2 is 10");
  EXPECT_ERROR_HAS(shard_write(p, {-1}, 10), p, "token 0 is -1");
  EXPECT_ERROR_HAS(shard_write(p, {0}, 0), p, "vocab size 0");
  EXPECT_TRUE(listing().empty());
}

// ---------------------------------------------------------------------------------------------------- files

class IoFiles : public IoTest {};

TEST_F(IoFiles, AtomicWriteReplacesExistingFile) {
  std::string p = path("a.txt");
  write_file_atomic(p, "old contents, longer than the new ones");
  write_file_atomic(p, "new");
  EXPECT_EQ(read_file(p), "new");
  EXPECT_EQ(listing(), std::vector<std::string>{"a.txt"});  // no temp file left
  write_file_atomic_parts(p, {{"ab", 2}, {"", 0}, {"cde", 3}});
  EXPECT_EQ(read_file(p), "abcde");
}

TEST_F(IoFiles, FailedWriteLeavesNothingBehind) {
  std::string p = path("no/such/dir/a.txt");
  EXPECT_ERROR_HAS(write_file_atomic(p, "x"), "[file] " + p);
  EXPECT_FALSE(dir_exists(path("no")));
  EXPECT_TRUE(listing().empty());
}

TEST_F(IoFiles, FailedWriteKeepsPreviousFile) {
  // A child process with a 4 KiB file size limit tries to replace the file with 1 MiB; write() fails (EFBIG).
  std::string p = path("keep.txt");
  write_file_atomic(p, "previous");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim;
    getrlimit(RLIMIT_FSIZE, &lim);
    lim.rlim_cur = 4096;
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(2);
    try {
      write_file_atomic(p, std::string(1 << 20, 'x'));
    } catch (const Error& e) {
      std::string msg = e.what();
      _exit(msg.find("[file] " + p) != std::string::npos && msg.find(std::strerror(EFBIG)) != std::string::npos ? 0 : 3);
    }
    _exit(4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(read_file(p), "previous");
  EXPECT_EQ(listing(), std::vector<std::string>{"keep.txt"});
}

TEST_F(IoFiles, SymlinksAndTrees) {
  EXPECT_EQ(read_link(path("none")), "");
  write_file_atomic(path("a"), "A");
  write_file_atomic(path("b"), "B");
  EXPECT_EQ(read_link(path("a")), "");  // a file, not a link
  symlink_atomic("a", path("cur"));
  EXPECT_EQ(read_file(path("cur")), "A");
  symlink_atomic("b", path("cur"));  // replaces the link
  EXPECT_EQ(read_link(path("cur")), "b");
  EXPECT_EQ(read_file(path("cur")), "B");
  symlink_atomic("b", path("a"));  // replaces a file
  EXPECT_EQ(read_link(path("a")), "b");
  make_dirs(path("t/u/v"));
  write_file_atomic(path("t/u/v/f"), "x");
  remove_tree(path("t"));
  remove_tree(path("t"));  // absent: no error
  EXPECT_EQ(list_dir(dir), (std::vector<std::string>{"a", "b", "cur"}));
  EXPECT_ERROR_HAS(list_dir(path("nope")), "[file] " + path("nope"));
}

TEST_F(IoFiles, ReadErrorsNameTheFile) {
  std::string p = path("missing.txt");
  EXPECT_ERROR_HAS(read_file(p), "[file] " + p + ": cannot open: No such file or directory");
  write_file_atomic(path("big"), std::string(100, 'z'));
  EXPECT_ERROR_HAS(read_file(path("big"), 50), "[file] " + path("big"), "100 bytes", "50");
  EXPECT_EQ(read_file(path("big"), 100).size(), 100u);
  EXPECT_ERROR_HAS(read_file(dir), dir, "directory");
}

TEST_F(IoFiles, ReadJson) {
  std::string p = path("c.json");
  write_file_atomic(p, R"({"a": [1, 2], "b": "x"})");
  nlohmann::json j = read_json_file(p);
  EXPECT_EQ(j["a"][1], 2);
  EXPECT_EQ(j["b"], "x");
  write_file_atomic(p, "{\"a\": [1, 2,, 3]}");
  EXPECT_ERROR_HAS(read_json_file(p), "[json] " + p + ": parse error at byte 13: ");  // 1-based: the second ','
}

TEST_F(IoFiles, MakeDirsAndExists) {
  std::string d = path("x/y/z");
  make_dirs(d);
  EXPECT_TRUE(dir_exists(d));
  make_dirs(d);  // already there: fine
  make_dirs(d + "/");
  EXPECT_FALSE(file_exists(d));
  write_file_atomic(d + "/f", "1");
  EXPECT_TRUE(file_exists(d + "/f"));
  EXPECT_FALSE(dir_exists(d + "/f"));
  EXPECT_ERROR_HAS(make_dirs(d + "/f/g"), "[file] " + d + "/f/g", "not a directory");
  fsync_dir(d);
  EXPECT_ERROR_HAS(fsync_dir(path("nope")), path("nope"));
}
