#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/check.h"
#include "formats/checksum.h"
#include "core/files.h"

namespace aah {

// Tensor data is copied with memcpy/pread straight into host types: the file format is little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;

// Bytes per element of a known dtype, 0 for an unknown one.
size_t dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64") return 8;
  if (d == "F32" || d == "I32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL") return 1;
  return 0;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); i++) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

std::string offsets_str(uint64_t begin, uint64_t end) { return str_cat("[", begin, ", ", end, "]"); }

// Byte size of a tensor; false if the element count or the byte count overflows.
bool shape_bytes(const std::vector<int64_t>& shape, size_t elem_size, uint64_t* bytes) {
  int64_t numel = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(numel, d, &numel)) return false;
  return !__builtin_mul_overflow(uint64_t(numel), uint64_t(elem_size), bytes);
}

uint64_t load_u64_le(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------------- reading

SafetensorsReader::SafetensorsReader(const std::string& path)
    : SafetensorsReader(ByteSource::file(path, "[safetensors]")) {}

SafetensorsReader::SafetensorsReader(ByteSource src) : src_(std::move(src)) {
  const std::string& path = src_.name();
  auto bad = [&](const auto&... what) { fail("[safetensors] ", path, ": ", what...); };

  const uint64_t file_size = src_.size();
  if (file_size < 8) bad("file is ", file_size, " bytes, too short for the 8-byte header length");

  unsigned char len_bytes[8];
  src_.read(len_bytes, 8, 0);
  uint64_t header_len = load_u64_le(len_bytes);
  if (header_len > kMaxHeaderBytes) bad("header length ", header_len, " is more than the 100 MiB limit");
  if (header_len > file_size - 8)
    bad("header length ", header_len, " goes beyond the end of the file (", file_size, " bytes; truncated?)");
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  std::string text(header_len, '\0');
  src_.read(text.data(), text.size(), 8);
  const nlohmann::json header = parse_json(text, path, "[safetensors]", "header is not valid JSON:");
  if (!header.is_object()) bad("header is not a JSON object");

  for (const auto& item : header.items()) {
    const std::string& key = item.key();  // not a structured binding: clang 14 cannot capture one
    const nlohmann::json& val = item.value();
    if (key == "__metadata__") {
      if (!val.is_object()) bad("__metadata__ is not a JSON object");
      for (const auto& [k, v] : val.items()) {
        if (!v.is_string()) bad("__metadata__ entry '", k, "' is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto bad_tensor = [&](const auto&... what) { fail("[safetensors] ", path, ": tensor '", key, "': ", what...); };
    if (!val.is_object()) bad_tensor("entry is not a JSON object");

    SafetensorsTensor t;
    t.name = key;
    auto dtype = val.find("dtype");
    if (dtype == val.end() || !dtype->is_string()) bad_tensor("missing or non-string \"dtype\"");
    t.dtype = dtype->get<std::string>();
    size_t elem = dtype_size(t.dtype);
    if (elem == 0) bad_tensor("unknown dtype '", t.dtype, "'");

    auto shape = val.find("shape");
    if (shape == val.end() || !shape->is_array()) bad_tensor("missing or non-array \"shape\"");
    for (const auto& d : *shape) {
      // nlohmann stores non-negative integers as unsigned, negative ones as signed.
      if (d.is_number_integer() && !d.is_number_unsigned()) bad_tensor("shape has negative dimension ", d.dump());
      if (!d.is_number_unsigned()) bad_tensor("shape has a dimension that is not an integer: ", d.dump());
      uint64_t v = d.get<uint64_t>();
      if (v > uint64_t(INT64_MAX)) bad_tensor("shape dimension ", v, " is too large");
      t.shape.push_back(int64_t(v));
    }
    uint64_t nbytes = 0;
    if (!shape_bytes(t.shape, elem, &nbytes)) bad_tensor("shape ", shape_str(t.shape), " is too large (byte count overflows)");

    auto offsets = val.find("data_offsets");
    if (offsets == val.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned())
      bad_tensor("\"data_offsets\" must be [begin, end], two non-negative integers");
    t.begin = (*offsets)[0].get<uint64_t>();
    t.end = (*offsets)[1].get<uint64_t>();
    std::string offs = offsets_str(t.begin, t.end);
    if (t.begin > t.end) bad_tensor("data_offsets ", offs, " begin after they end");
    if (t.end > data_size)
      bad_tensor("data_offsets ", offs, " go beyond the data section (", data_size, " bytes; truncated?)");
    if (t.end - t.begin != nbytes)
      bad_tensor("shape ", shape_str(t.shape), " of dtype ", t.dtype, " needs ", nbytes, " bytes, data_offsets ", offs,
                 " hold ", t.end - t.begin);
    tensors_.push_back(std::move(t));
  }

  // In file order, no tensor may start before the previous (non-empty) one ends.
  std::sort(tensors_.begin(), tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : tensors_) {
    if (t.begin == t.end) continue;
    if (prev && t.begin < prev->end)
      fail("[safetensors] ", path, ": tensor '", t.name, "': data_offsets ", offsets_str(t.begin, t.end),
           " overlap tensor '", prev->name, "' ", offsets_str(prev->begin, prev->end));
    prev = &t;
  }
  if (metadata_.count(kChecksumKey)) verify_checksum();
}

void SafetensorsReader::verify_checksum() const {
  const std::string& want = metadata_.at(kChecksumKey);
  const bool well_formed = want.size() == 15 && want.compare(0, 7, "crc32c:") == 0 &&
                           want.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
  if (!well_formed)
    fail("[safetensors] ", path(), ": corrupt header: __metadata__ '", kChecksumKey, "' is '", want,
         "', expected crc32c:<8 hex digits>");
  uint32_t crc = 0;
  std::vector<unsigned char> buf(size_t(1) << 20);
  for (uint64_t at = data_start_; at < src_.size();) {
    const size_t n = size_t(std::min<uint64_t>(buf.size(), src_.size() - at));
    src_.read(buf.data(), n, at);
    crc = crc32c(buf.data(), n, crc);
    at += n;
  }
  if (checksum_str(crc) != want)
    fail("[safetensors] ", path(), ": corrupt: data checksum expected ", want, " (from the header), got ",
         checksum_str(crc));
}

bool SafetensorsReader::has(const std::string& name) const {
  for (const SafetensorsTensor& t : tensors_)
    if (t.name == name) return true;
  return false;
}

const SafetensorsTensor& SafetensorsReader::tensor(const std::string& name) const {
  for (const SafetensorsTensor& t : tensors_)
    if (t.name == name) return t;
  fail("[safetensors] ", path(), ": tensor '", name, "': not in the file (", tensors_.size(), " tensors)");
}

namespace {

void check_shape(const std::string& path, const SafetensorsTensor& t, const std::vector<int64_t>& expected) {
  if (!expected.empty() && expected != t.shape)
    fail("[safetensors] ", path, ": tensor '", t.name, "' has shape ", shape_str(t.shape), ", expected ",
         shape_str(expected));
}

}  // namespace

void SafetensorsReader::read_f32(const std::string& name, float* dst, const std::vector<int64_t>& expected_shape) const {
  const SafetensorsTensor& t = tensor(name);
  check_shape(path(), t, expected_shape);
  const uint64_t offset = data_start_ + t.begin;
  const size_t n = size_t(t.numel());
  if (t.dtype == "F32") {
    src_.read(dst, n * 4, offset);
    return;
  }
  if (t.dtype != "BF16" && t.dtype != "F16" && t.dtype != "F64")
    fail("[safetensors] ", path(), ": tensor '", name, "': dtype ", t.dtype, " cannot be read as fp32");

  // Convert in chunks so a large tensor needs no second full-size buffer.
  const size_t elem = dtype_size(t.dtype);
  const size_t chunk = size_t(1) << 20;
  std::vector<unsigned char> buf(std::min(n, chunk) * elem);
  for (size_t i = 0; i < n; i += chunk) {
    size_t m = std::min(chunk, n - i);
    src_.read(buf.data(), m * elem, offset + i * elem);
    for (size_t k = 0; k < m; k++) {
      const unsigned char* p = buf.data() + k * elem;
      if (t.dtype == "F64") {
        double v;
        std::memcpy(&v, p, 8);
        dst[i + k] = float(v);
      } else {
        uint16_t h;
        std::memcpy(&h, p, 2);
        dst[i + k] = t.dtype == "BF16" ? bf16_to_f32(h) : f16_to_f32(h);
      }
    }
  }
}

void SafetensorsReader::read_raw(const std::string& name, const std::string& dtype, void* dst,
                                 const std::vector<int64_t>& expected_shape) const {
  const SafetensorsTensor& t = tensor(name);
  if (t.dtype != dtype) fail("[safetensors] ", path(), ": tensor '", name, "': dtype is ", t.dtype, ", expected ", dtype);
  check_shape(path(), t, expected_shape);
  src_.read(dst, t.end - t.begin, data_start_ + t.begin);
}

// ---------------------------------------------------------------------------------------------------- writing

namespace {

void check_finite(const std::string& path, const SafetensorsTensor& t, const void* data, size_t bytes) {
  auto scan = [&](const auto* v, size_t n) {
    for (size_t i = 0; i < n; i++)
      if (!std::isfinite(v[i]))
        fail("[safetensors] ", path, ": tensor '", t.name, "' holds a non-finite value (", double(v[i]),
             ") at element ", i, "; the file is not written");
  };
  if (t.dtype == "F32") scan(static_cast<const float*>(data), bytes / 4);
  if (t.dtype == "F64") scan(static_cast<const double*>(data), bytes / 8);
}

}  // namespace

void SafetensorsWriter::add_f32(const std::string& name, const float* data, std::vector<int64_t> shape) {
  uint64_t bytes = 0;
  for (int64_t d : shape)
    if (d < 0) fail("[safetensors] tensor '", name, "': negative dimension in shape ", shape_str(shape));
  if (!shape_bytes(shape, 4, &bytes)) fail("[safetensors] tensor '", name, "': shape ", shape_str(shape), " is too large");
  add_raw(name, "F32", data, size_t(bytes), std::move(shape));
}

void SafetensorsWriter::add_raw(const std::string& name, const std::string& dtype, const void* data, size_t bytes,
                                std::vector<int64_t> shape) {
  if (name == "__metadata__") fail("[safetensors] '__metadata__' cannot be a tensor name");
  for (const Item& it : items_)
    if (it.info.name == name) fail("[safetensors] tensor '", name, "' added twice");
  size_t elem = dtype_size(dtype);
  if (elem == 0) fail("[safetensors] tensor '", name, "': unknown dtype '", dtype, "'");
  for (int64_t d : shape)
    if (d < 0) fail("[safetensors] tensor '", name, "': negative dimension in shape ", shape_str(shape));
  uint64_t need = 0;
  if (!shape_bytes(shape, elem, &need) || need != bytes)
    fail("[safetensors] tensor '", name, "': shape ", shape_str(shape), " of dtype ", dtype, " does not fit ", bytes,
         " bytes");

  Item it;
  it.info.name = name;
  it.info.dtype = dtype;
  it.info.shape = std::move(shape);
  it.info.begin = items_.empty() ? 0 : items_.back().info.end;
  it.info.end = it.info.begin + bytes;
  it.data = data;
  items_.push_back(std::move(it));
}

void SafetensorsWriter::write(const std::string& path) const {
  uint32_t crc = 0;
  for (const Item& it : items_) {
    const size_t bytes = size_t(it.info.end - it.info.begin);
    if (require_finite_) check_finite(path, it.info, it.data, bytes);
    crc = crc32c(it.data, bytes, crc);
  }
  std::map<std::string, std::string> metadata = metadata_;
  metadata[kChecksumKey] = checksum_str(crc);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = metadata;
  for (const Item& it : items_)
    header[it.info.name] = {{"dtype", it.info.dtype},
                            {"shape", it.info.shape},
                            {"data_offsets", {it.info.begin, it.info.end}}};
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. a name that is not valid UTF-8
    fail("[safetensors] ", path, ": cannot encode header: ", e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the Hugging Face writer does.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');

  unsigned char len_bytes[8];
  for (int i = 0; i < 8; i++) len_bytes[i] = (uint64_t(text.size()) >> (8 * i)) & 0xff;
  std::vector<ByteSpan> parts = {{len_bytes, 8}, {text.data(), text.size()}};
  for (const Item& it : items_) parts.push_back({it.data, size_t(it.info.end - it.info.begin)});
  write_file_atomic_parts(path, parts);
}

// ---------------------------------------------------------------------------------------------------- conversions

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    float v = std::ldexp(float(mant), -24);
    return sign ? -v : v;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, or NaN keeping its payload
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

uint16_t f32_to_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return uint16_t((bits >> 16) | 0x0040);  // keep it a (quiet) NaN even if the payload was low
  uint32_t round = 0x7fff + ((bits >> 16) & 1);             // nearest, ties to even
  return uint16_t((bits + round) >> 16);
}

}  // namespace aah
