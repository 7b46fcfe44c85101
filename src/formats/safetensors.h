// safetensors files (https://huggingface.co/docs/safetensors): 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32"|"BF16"|"F16"|..., "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data. Reading validates everything against the file (lengths, offsets, overlaps, shape products,
// dtypes) and converts BF16/F16/F32 to fp32; every error names the file and the tensor.
//
// Our files carry a CRC-32C of the data section in __metadata__ (key "aah.checksum", value "crc32c:<8 hex>"); the
// reader verifies it when present, so a corrupt file is an error ("corrupt: data checksum ..."), never wrong
// numbers. Files without the key (written by other tools) load as before.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/files.h"

namespace aah {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;            // "F32", "BF16", "F16", "F64", "I32", "I64", "U8", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
  int64_t numel() const;
};

class SafetensorsReader {
 public:
  // Opens and validates the header and the data checksum if there is one; throws aah::Error naming the file and
  // what is wrong.
  explicit SafetensorsReader(const std::string& path);
  // Same for bytes already open or in memory (ByteSource::memory(bytes, name, "[safetensors]")).
  explicit SafetensorsReader(ByteSource src);
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return src_.name(); }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const;
  const SafetensorsTensor& tensor(const std::string& name) const;  // error if missing

  // Reads tensor `name` into dst (fp32), converting from F32/BF16/F16/F64. If `expected_shape` is non-empty it
  // must equal the stored shape: "[safetensors] FILE: tensor 'wq' has shape (64, 32), expected (64, 64)".
  void read_f32(const std::string& name, float* dst, const std::vector<int64_t>& expected_shape) const;
  // Raw bytes of a tensor of the given dtype (e.g. "U8", "I64", "F64"), with shape check as above.
  void read_raw(const std::string& name, const std::string& dtype, void* dst,
                const std::vector<int64_t>& expected_shape) const;

 private:
  ByteSource src_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;

  void verify_checksum() const;
};

// Collects tensors (the data pointers must stay valid until write()) and writes one file, atomically (temp file,
// fsync, rename, fsync of the directory), with the data checksum in its metadata. Tensors are written in the order
// added; names must be unique.
class SafetensorsWriter {
 public:
  void add_f32(const std::string& name, const float* data, std::vector<int64_t> shape);
  void add_raw(const std::string& name, const std::string& dtype, const void* data, size_t bytes,
               std::vector<int64_t> shape);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // Makes write() refuse, before writing anything, a file whose F32/F64 tensors hold a NaN or an infinity.
  void require_finite() { require_finite_ = true; }
  void write(const std::string& path) const;

 private:
  struct Item {
    SafetensorsTensor info;
    const void* data;
  };
  std::vector<Item> items_;
  std::map<std::string, std::string> metadata_;
  bool require_finite_ = false;
};

// Conversions used by the reader (exposed for tests): IEEE binary16 and bfloat16 to fp32, and fp32 to bf16 with
// round-to-nearest-even.
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);

}  // namespace aah
