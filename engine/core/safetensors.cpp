// See safetensors.h. The format is the one of huggingface/safetensors: header length as
// u64 little-endian, a JSON object mapping names to {dtype, shape, data_offsets} (plus an
// optional "__metadata__" of string values), padded with spaces so data starts at a
// multiple of 8, then the data section. Offsets are relative to the data section.
#include "engine/core/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/core/checked_size.h"
#include "engine/core/checksum.h"
#include "engine/core/json_limits.h"

namespace driftless {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; big-endian hosts would need byte swaps");

namespace {

constexpr const char* kOp = "safetensors";
// The reference implementation refuses larger headers; so do we (a corrupt length field
// should not make us parse megabytes of tensor data as JSON).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

using OrderedJson = nlohmann::ordered_json;

bool dtype_from_name(const std::string& name, DType* out) {
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64}) {
    if (name == safetensors_dtype_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

// Element size of the safetensors dtypes that have no DType here: files holding them open
// (and are bounds-checked); get() widens F16 to f32 and refuses the others. 0: not a
// safetensors dtype.
size_t foreign_dtype_size(const std::string& name) {
  static const std::map<std::string, size_t> sizes = {
      {"F16", 2}, {"BOOL", 1}, {"U8", 1},  {"I8", 1},      {"I16", 2},
      {"U16", 2}, {"U32", 4},  {"U64", 8}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = sizes.find(name);
  return it == sizes.end() ? 0 : it->second;
}

// IEEE half to float; every half is exactly a float.
float half_to_float(uint16_t h) {
  const bool negative = h & 0x8000;
  const uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float f;
  if (exponent == 0x1f) {
    f = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (exponent == 0) {
    f = std::ldexp(float(mantissa), -24);  // zero or subnormal
  } else {
    f = std::ldexp(float(mantissa | 0x400), int(exponent) - 25);
  }
  return negative ? -f : f;
}

// Removes the temporary file unless the write completed.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void open(const std::string& final_path) {
    // A leftover of a killed writer with our pid is replaced; a symbolic link or FIFO under
    // the temporary name is removed, never followed or waited on.
    ::unlink(path_.c_str());
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    DL_CHECK(
        fd_ >= 0, kOp,
        final_path << ": cannot create temporary file " << path_ << ": " << std::strerror(errno));
  }
  void write(const void* data, size_t bytes, const std::string& final_path) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      ssize_t n = ::write(fd_, p, bytes);
      if (n < 0 && errno == EINTR) continue;
      DL_CHECK(n > 0, kOp,
               final_path << ": write to " << path_ << " failed: " << std::strerror(errno));
      p += n;
      bytes -= size_t(n);
    }
  }
  void commit(const std::string& final_path) {
    DL_CHECK(::fsync(fd_) == 0, kOp,
             final_path << ": fsync of " << path_ << " failed: " << std::strerror(errno));
    int fd = fd_;
    fd_ = -1;
    DL_CHECK(::close(fd) == 0, kOp,
             final_path << ": close of " << path_ << " failed: " << std::strerror(errno));
    DL_CHECK(::rename(path_.c_str(), final_path.c_str()) == 0, kOp,
             final_path << ": rename from " << path_ << " failed: " << std::strerror(errno));
    committed_ = true;
    // Make the rename itself durable; failure here does not undo a complete file.
    std::string dir = std::filesystem::path(final_path).parent_path().string();
    int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "F32";
    case DType::f64:
      return "F64";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
  }
  return "?";
}

std::string safetensors_metadata_checksum(const std::map<std::string, std::string>& metadata,
                                          const std::string& checksums_key) {
  // Length-prefixed, so no two different maps serialize alike.
  std::string text;
  for (const auto& [k, v] : metadata) {
    if (k == checksums_key) continue;
    text += std::to_string(k.size()) + ":" + k + std::to_string(v.size()) + ":" + v;
  }
  return checksum_hex(checksum64(text.data(), text.size()));
}

// ---- writing ----

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::string& checksums_key) {
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  OrderedJson header = OrderedJson::object();
  OrderedJson meta = OrderedJson::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = std::move(meta);
  OrderedJson checksums = OrderedJson::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    DL_CHECK(
        !name.empty() && name != "__metadata__", kOp,
        path << ": tensor name must be non-empty and not \"__metadata__\", got \"" << name << "\"");
    DL_CHECK(!header.contains(name), kOp, path << ": tensor name \"" << name << "\" given twice");
    DL_CHECK(t.defined(), kOp, path << ": tensor \"" << name << "\" is undefined");
    Tensor h = t.to(Device::cpu).contiguous();
    OrderedJson entry = OrderedJson::object();
    entry["dtype"] = safetensors_dtype_name(h.dtype());
    entry["shape"] = h.shape();
    entry["data_offsets"] = {offset, offset + h.nbytes()};
    header[name] = std::move(entry);
    offset += h.nbytes();
    if (!checksums_key.empty())
      checksums[name] = checksum_hex(checksum64(h.nbytes() ? h.raw_data() : nullptr, h.nbytes()));
    host.push_back(std::move(h));
  }
  if (!checksums_key.empty()) {
    checksums[kMetadataChecksumName] = safetensors_metadata_checksum(metadata, checksums_key);
    header["__metadata__"][checksums_key] = checksums.dump();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    DL_FAIL(kOp, path << ": cannot encode header (names and metadata must be UTF-8): " << e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t header_len = text.size();
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(header_len >> (8 * i));

  TempFile tmp(path + ".tmp." + std::to_string(::getpid()));
  tmp.open(path);
  tmp.write(len_bytes, 8, path);
  tmp.write(text.data(), text.size(), path);
  for (const Tensor& h : host)
    if (h.nbytes() > 0) tmp.write(h.raw_data(), h.nbytes(), path);
  tmp.commit(path);
}

// ---- reading ----

SafetensorsFile::SafetensorsFile() = default;
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  DL_CHECK(it != entries_.end(), kOp,
           path_ << ": no tensor named \"" << name << "\" (the file holds " << names_.size()
                 << " tensors)");
  return it->second;
}

Tensor SafetensorsFile::get(const std::string& name) const {
  const Entry& e = entry(name);
  const unsigned char* src = file_.data() + data_start_ + e.begin;
  if (e.stored == "F16") {
    std::vector<float> v(size_t((e.end - e.begin) / 2));
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      v[i] = half_to_float(h);
    }
    return Tensor::from_vector(v, e.shape);
  }
  DL_CHECK(e.stored == safetensors_dtype_name(e.dtype), kOp,
           path_ << ": tensor \"" << name << "\" has dtype " << e.stored
                 << ", which driftless does not load (F32, F64, BF16, I32, I64; F16 is widened "
                    "to F32)");
  Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu);
  if (e.end > e.begin)
    std::memcpy(t.raw_data(), file_.data() + data_start_ + e.begin, e.end - e.begin);
  return t;
}

const unsigned char* SafetensorsFile::bytes(const std::string& name) const {
  return file_.data() + data_start_ + entry(name).begin;
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.file_ = MappedFile(path, kOp);
  const uint64_t file_size = f.file_.size();
  if (file_size < 8)
    DL_FAIL(kOp, path << ": truncated file: expected an 8-byte header length at byte 0, got a "
                      << file_size << "-byte file");
  const unsigned char* bytes = f.file_.data();

  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= uint64_t(bytes[i]) << (8 * i);
  DL_CHECK(header_len <= file_size - 8, kOp,
           path << ": header length " << header_len << " (at byte 0) runs past the end of the "
                << file_size << "-byte file; truncated or not a safetensors file");
  DL_CHECK(header_len <= kMaxHeaderBytes, kOp,
           path << ": header length " << header_len << " (at byte 0) exceeds the limit of "
                << kMaxHeaderBytes << " bytes");
  f.data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - f.data_start_;
  const char* text = reinterpret_cast<const char*>(bytes + 8);

  // A safetensors header nests 3 deep; a deeper one is refused before parsing, so no
  // message that quotes part of it (dump()) recurses through hostile nesting.
  if (const auto deep = json_too_deep(std::string_view(text, header_len)))
    DL_FAIL(kOp, path << ": JSON header nested deeper than " << kMaxJsonDepth << " levels at byte "
                      << 8 + *deep << "; not a safetensors file");
  OrderedJson header;
  try {
    header = OrderedJson::parse(text, text + header_len);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1 within the header text.
    uint64_t at = 8 + (e.byte > 0 ? e.byte - 1 : 0);
    DL_FAIL(kOp, path << ": bad JSON header at byte " << at << ": " << e.what());
  }
  DL_CHECK(header.is_object(), kOp,
           path << ": header at byte 8 must be a JSON object, got " << header.type_name());

  // Best-effort file offset of a tensor's header entry, for error messages.
  const std::string_view header_text(text, header_len);
  auto where = [&](const std::string& name) -> uint64_t {
    size_t pos = header_text.find("\"" + name + "\"");
    return 8 + (pos == std::string_view::npos ? 0 : pos);
  };

  auto quote = [](const OrderedJson& j) { return json_excerpt(j.dump()); };

  std::vector<std::string> order;  // header order, for stable ties
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const OrderedJson& v = it.value();
    if (name == "__metadata__") {
      DL_CHECK(v.is_object(), kOp,
               path << ": \"__metadata__\" at byte " << where(name) << " must be an object, got "
                    << v.type_name());
      for (auto m = v.begin(); m != v.end(); ++m) {
        DL_CHECK(m.value().is_string(), kOp,
                 path << ": metadata value of \"" << m.key() << "\" at byte " << where(name)
                      << " must be a string, got " << m.value().type_name());
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    // Only messages search for the entry's offset: one search per tensor would be quadratic
    // in a hostile header of many names.
    DL_CHECK(
        v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
        kOp,
        path << ": tensor \"" << name << "\" at byte " << where(name)
             << ": expected an object with dtype, shape and data_offsets, got " << quote(v));
    SafetensorsFile::Entry e;
    const OrderedJson& dt = v["dtype"];
    e.stored = dt.is_string() ? dt.get<std::string>() : "";
    size_t element_size = 0;
    if (dtype_from_name(e.stored, &e.dtype))
      element_size = dtype_size(e.dtype);
    else if ((element_size = foreign_dtype_size(e.stored)) > 0)
      e.dtype = DType::f32;  // F16 widens to it; get() refuses the others
    DL_CHECK(element_size > 0, kOp,
             path << ": tensor \"" << name << "\" at byte " << where(name) << ": unknown dtype "
                  << quote(dt)
                  << " (expected F32, F64, BF16, I32, I64, F16, BOOL, U8, I8, I16, U16, U32, U64, "
                     "F8_E4M3 or F8_E5M2)");
    const OrderedJson& sh = v["shape"];
    DL_CHECK(sh.is_array(), kOp,
             path << ": tensor \"" << name << "\" at byte " << where(name)
                  << ": shape must be an array, got " << quote(sh));
    for (const auto& s : sh) {
      DL_CHECK(s.is_number_unsigned(), kOp,
               path << ": tensor \"" << name << "\" at byte " << where(name)
                    << ": shape entries must be non-negative integers, got " << quote(sh));
      const uint64_t d = s.get<uint64_t>();
      DL_CHECK(d <= uint64_t(std::numeric_limits<int64_t>::max()), kOp,
               path << ": tensor \"" << name << "\" at byte " << where(name) << ": shape "
                    << quote(sh) << " is too large");
      e.shape.push_back(int64_t(d));
    }
    // Elements times element size, overflow-checked: a wrapped product would match a small
    // byte range ([8, 2, 2^57 + 1] F64 in 128 bytes).
    const std::optional<int64_t> want_bytes = checked_product(e.shape, int64_t(element_size));
    DL_CHECK(want_bytes, kOp,
             path << ": tensor \"" << name << "\" at byte " << where(name) << ": " << e.stored
                  << " shape " << quote(sh) << " needs more than 2^63 bytes");
    const OrderedJson& off = v["data_offsets"];
    DL_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() &&
                 off[1].is_number_unsigned(),
             kOp,
             path << ": tensor \"" << name << "\" at byte " << where(name)
                  << ": data_offsets must be two non-negative integers, got " << quote(off));
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    DL_CHECK(e.begin <= e.end && e.end <= data_size, kOp,
             path << ": tensor \"" << name << "\" at byte " << where(name) << ": data_offsets ["
                  << e.begin << ", " << e.end << "] out of bounds: file bytes ["
                  << f.data_start_ + e.begin << ", " << f.data_start_ + e.end << ") of a "
                  << file_size << "-byte file (data section " << data_size << " bytes from byte "
                  << f.data_start_ << ")");
    const uint64_t want = uint64_t(*want_bytes);
    DL_CHECK(e.end - e.begin == want, kOp,
             path << ": tensor \"" << name << "\" at byte " << where(name) << ": " << e.stored
                  << " shape " << quote(sh) << " needs " << want << " bytes, data_offsets ["
                  << e.begin << ", " << e.end << "] hold " << e.end - e.begin);
    f.entries_.emplace(name, std::move(e));
    order.push_back(name);
  }

  // File order: ascending data offset (header order breaks ties between empty tensors).
  f.names_ = order;
  std::stable_sort(f.names_.begin(), f.names_.end(), [&](const auto& a, const auto& b) {
    return f.entries_[a].begin < f.entries_[b].begin;
  });
  const std::string* prev = nullptr;
  for (const std::string& name : f.names_) {
    const auto& e = f.entries_[name];
    if (e.begin == e.end) continue;
    if (prev) {
      const auto& p = f.entries_[*prev];
      DL_CHECK(p.end <= e.begin, kOp,
               path << ": tensors \"" << *prev << "\" and \"" << name << "\" overlap at file byte "
                    << f.data_start_ + e.begin << " (data_offsets [" << p.begin << ", " << p.end
                    << "] and [" << e.begin << ", " << e.end << "])");
    }
    prev = &name;
  }
  return f;
}

}  // namespace driftless
