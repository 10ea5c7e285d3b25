// safetensors reader/writer (engine/core/safetensors.h): round trip of every dtype with
// views and metadata, byte-exact output against a hand-written file, reading a file laid
// out the way huggingface/safetensors writes it, every corruption, atomic writes.
#include "engine/core/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "tests/test_paths.h"

namespace driftless {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<unsigned char>;

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// A file with the given header text (length prefix computed, no padding added) and data.
Bytes raw_file(const std::string& header, const Bytes& data) {
  Bytes b(8);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(n >> (8 * i));
  b.insert(b.end(), header.begin(), header.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_EQ(got.dtype(), want.dtype()) << name;
  ASSERT_EQ(got.shape(), want.shape()) << name;
  EXPECT_TRUE(got.is_contiguous()) << name;
  EXPECT_EQ(got.device(), Device::cpu) << name;
  if (want.dtype() == DType::i64) {
    EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>()) << name;
  } else {
    EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>()) << name;  // exact for all
  }
}

TEST(Safetensors, RoundTripEveryDtypeViewsAndMetadata) {
  const std::string path = testing::scratch_dir() + "/all.safetensors";
  Tensor base = Tensor::randn({4, 6}, 11);
  Tensor cube = Tensor::randn({2, 3, 4}, 12, DType::f64);
  std::vector<std::pair<std::string, Tensor>> tensors = {
      {"f32", Tensor::randn({3, 5}, 1)},
      {"f64", cube},
      {"bf16", Tensor::randn({7}, 2, DType::bf16)},
      {"i32", Tensor::from_vector<int32_t>({-7, 0, 2147483647, -2147483647 - 1}, {2, 2})},
      {"i64.scalar", Tensor::from_vector<int64_t>({(int64_t(1) << 60) + 3}, {})},
      {"empty", Tensor::zeros({0, 3})},
      {"transposed", base.transpose(0, 1)},   // non-contiguous view
      {"narrowed", base.narrow(1, 2, 3)},     // offset and gaps
      {"permuted", cube.permute({2, 0, 1})},  // rank-3 permutation
      {"model.h.0.attn.c_attn.weight", Tensor::randn({2, 2}, 3, DType::bf16)},
  };
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}, {"note", "ü"}};
  write_safetensors(path, tensors, meta);

  SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), meta);
  std::vector<std::string> names;
  for (const auto& [n, t] : tensors) names.push_back(n);
  EXPECT_EQ(f.names(), names);  // file order is the order given
  for (const auto& [n, t] : tensors) {
    ASSERT_TRUE(f.contains(n)) << n;
    expect_same(f.get(n), t.contiguous(), n);
    EXPECT_EQ(f.entry(n).end - f.entry(n).begin, t.nbytes()) << n;
  }
  EXPECT_FALSE(f.contains("missing"));
  try {
    f.get("missing");
    FAIL() << "get of an absent tensor must throw";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("\"missing\""), std::string::npos) << msg;
  }
  // The copy is independent of the mapping.
  SafetensorsFile moved = std::move(f);
  Tensor t = moved.get("f32");
  t.fill_(0);
  expect_same(moved.get("f32"), tensors[0].second, "f32 after writing to a copy");
}

TEST(Safetensors, EmptyMetadataAndNoTensors) {
  const std::string path = testing::scratch_dir() + "/empty.safetensors";
  write_safetensors(path, {});
  SafetensorsFile f = read_safetensors(path);
  EXPECT_TRUE(f.names().empty());
  EXPECT_TRUE(f.metadata().empty());
}

// The exact bytes of a small file, written out by hand:
//   header = {"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],
//             "data_offsets":[0,8]},"b":{"dtype":"I32","shape":[1,1],"data_offsets":[8,12]}}
//   is 141 characters, padded with 3 spaces to 144 = 0x90 (a multiple of 8);
//   data = 1.0f (00 00 80 3f), -2.0f (00 00 00 c0), int32 7 (07 00 00 00).
TEST(Safetensors, ByteExactAgainstHandWrittenFile) {
  const std::string path = testing::scratch_dir() + "/small.safetensors";
  write_safetensors(path,
                    {{"a", Tensor::from_vector<float>({1.0f, -2.0f})},
                     {"b", Tensor::from_vector<int32_t>({7}, {1, 1})}},
                    {{"format", "pt"}});
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"I32\",\"shape\":[1,1],\"data_offsets\":[8,12]}}   ";
  ASSERT_EQ(header.size(), 144u);
  Bytes want = {0x90, 0, 0, 0, 0, 0, 0, 0};
  want.insert(want.end(), header.begin(), header.end());
  for (unsigned char c : {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0, 0x07, 0x00, 0x00, 0x00})
    want.push_back(c);
  EXPECT_EQ(read_bytes(path), want);
}

// Laid out as huggingface/safetensors may write it: "__metadata__" not first, header
// order different from data order, a 0-d tensor, space padding.
//   z: I32 [1] = 5 at [0, 4); a: BF16 [2] = {1.0, -0.5} at [4, 8); e: F64 [] = 0.25 at [8, 16)
TEST(Safetensors, ReadsHuggingFaceLayout) {
  const std::string path = testing::scratch_dir() + "/hf.safetensors";
  const std::string header =
      "{\"a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]},"
      "\"e\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[8,16]},"
      "\"__metadata__\":{\"format\":\"pt\"},"
      "\"z\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}        ";
  ASSERT_EQ(header.size() % 8, 0u);
  const Bytes data = {0x05, 0,    0,    0,                        // z
                      0x80, 0x3f, 0x00, 0xbf,                     // a: bf16 0x3f80, 0xbf00
                      0,    0,    0,    0,    0, 0, 0xd0, 0x3f};  // e: 0.25
  write_bytes(path, raw_file(header, data));
  SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"z", "a", "e"}));
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.get("z").to_vector<int32_t>(), std::vector<int32_t>{5});
  Tensor a = f.get("a");
  EXPECT_EQ(a.dtype(), DType::bf16);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1.0f, -0.5f}));
  Tensor e = f.get("e");
  EXPECT_EQ(e.dim(), 0);
  EXPECT_EQ(e.item(), 0.25);
}

// Dtypes without a DType here: F16 is widened to f32 exactly (normal, subnormal, signed zero,
// infinity); a BOOL buffer (old transformers' attn.bias) lets the file open, get() refuses it.
TEST(Safetensors, F16IsWidenedAndBoolIsListed) {
  const std::string path = testing::scratch_dir() + "/half.safetensors";
  const std::string header =
      "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,8]},"
      "\"m\":{\"dtype\":\"BOOL\",\"shape\":[1,1,2,2],\"data_offsets\":[8,12]}}";
  // 1.0 = 0x3c00, -2.5 = 0xc100, 2^-24 = 0x0001 (smallest subnormal), +inf = 0x7c00.
  const Bytes data = {0x00, 0x3c, 0x00, 0xc1, 0x01, 0x00, 0x00, 0x7c, 1, 0, 1, 1};
  write_bytes(path, raw_file(header, data));
  SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"h", "m"}));
  EXPECT_EQ(f.entry("h").stored, "F16");
  EXPECT_EQ(f.entry("m").stored, "BOOL");
  Tensor h = f.get("h");
  EXPECT_EQ(h.dtype(), DType::f32);
  EXPECT_EQ(h.shape(), (Shape{2, 2}));
  EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1.0f, -2.5f, std::ldexp(1.0f, -24),
                                                      std::numeric_limits<float>::infinity()}));
  try {
    f.get("m");
    ADD_FAILURE() << "expected driftless::Error for a BOOL tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has dtype BOOL, which driftless does not load"),
              std::string::npos)
        << e.what();
  }
}

// Each corrupt file throws Error naming the file and what is wrong.
TEST(Safetensors, CorruptFilesThrow) {
  const std::string dir = testing::scratch_dir();
  const std::string ok = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}    ";
  const Bytes eight(8, 0);
  struct Case {
    std::string name;
    Bytes bytes;
    std::string fragment;
  };
  // bad_json: the unexpected '}' is character 14 of the header, so file byte 8 + 14 = 22.
  Bytes huge_len = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
  Bytes truncated_data = raw_file(ok, eight);
  truncated_data.resize(truncated_data.size() - 3);
  const std::vector<Case> cases = {
      {"empty", {}, "truncated file"},
      {"short", {1, 2, 3, 4, 5}, "truncated file"},
      {"header_past_end", huge_len, "header length 65535 (at byte 0) runs past the end"},
      {"bad_json", raw_file("{\"x\":{\"dtype\":}}", {}), "bad JSON header at byte 22"},
      {"not_object", raw_file("[1, 2]", {}), "must be a JSON object"},
      {"unknown_dtype",
       raw_file("{\"x\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,4]}}", Bytes(4)),
       "unknown dtype \"Q4\""},
      {"foreign_size_mismatch",
       raw_file("{\"x\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,4]}}", Bytes(4)),
       "needs 6 bytes"},
      {"out_of_bounds",
       raw_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", Bytes(4)),
       "out of bounds"},
      {"truncated_data", truncated_data, "out of bounds"},
      {"overlap",
       raw_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                Bytes(12)),
       "overlap at file byte"},
      {"size_mismatch",
       raw_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", Bytes(8)),
       "needs 12 bytes"},
      {"negative_shape",
       raw_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", Bytes(8)),
       "non-negative integers"},
      {"missing_field", raw_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[2]}}", Bytes(8)),
       "data_offsets"},
      {"bad_metadata", raw_file("{\"__metadata__\":{\"step\":12}}", {}), "must be a string"},
  };
  for (const Case& c : cases) {
    const std::string path = dir + "/" + c.name + ".safetensors";
    write_bytes(path, c.bytes);
    try {
      read_safetensors(path);
      ADD_FAILURE() << c.name << ": expected driftless::Error";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("[safetensors] " + path, 0), 0u) << c.name << ": " << msg;
      EXPECT_NE(msg.find(c.fragment), std::string::npos) << c.name << ": " << msg;
    }
  }
  // The well-formed variant of those files does load.
  write_bytes(dir + "/ok.safetensors", raw_file(ok, eight));
  EXPECT_EQ(read_safetensors(dir + "/ok.safetensors").get("x").numel(), 2);
  EXPECT_THROW(read_safetensors(dir + "/does_not_exist.safetensors"), Error);
}

// Hostile headers: nesting deep enough to overflow a recursive walk (dump() in an error
// message) is refused by its offset before parsing; an element count whose byte size wraps
// 64 bits ([8, 2, 2^57 + 1] F64 "in" 128 bytes) is refused, not matched to 128 bytes.
TEST(Safetensors, HostileHeadersAreRefusedWithoutRecursionOrWrapping) {
  const std::string dir = testing::scratch_dir();
  const int depth = 200000;
  const std::string deep = "{\"x\":" + std::string(depth, '[') + std::string(depth, ']') + "}";
  write_bytes(dir + "/deep.safetensors", raw_file(deep, {}));
  try {
    read_safetensors(dir + "/deep.safetensors");
    ADD_FAILURE() << "a deeply nested header must be refused";
  } catch (const Error& e) {
    // Level 65 (the 64th bracket after "{\"x\":") opens at header character 68, file byte 76.
    EXPECT_NE(std::string(e.what()).find("nested deeper than 64 levels at byte 76"),
              std::string::npos)
        << e.what();
  }
  const std::string wrap =
      "{\"x\":{\"dtype\":\"F64\",\"shape\":[8,2,144115188075855873],\"data_offsets\":[0,"
      "128]}}";
  write_bytes(dir + "/wrap.safetensors", raw_file(wrap, Bytes(128)));
  try {
    read_safetensors(dir + "/wrap.safetensors");
    ADD_FAILURE() << "a shape whose bytes wrap 64 bits must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs more than 2^63 bytes"), std::string::npos)
        << e.what();
  }
}

// The checksums a checkpoint asks for cover the metadata too, under their own name.
TEST(Safetensors, ChecksumsCoverTheMetadata) {
  const std::string path = testing::scratch_dir() + "/sums.safetensors";
  const std::map<std::string, std::string> meta = {{"step", "5"}, {"config", "x"}};
  write_safetensors(path, {{"w", Tensor::zeros({2})}}, meta, "checksums");
  const auto sums = nlohmann::json::parse(read_safetensors(path).metadata().at("checksums"));
  EXPECT_EQ(sums.at(kMetadataChecksumName), safetensors_metadata_checksum(meta, "checksums"));
  auto edited = meta;
  edited["step"] = "2";
  EXPECT_NE(safetensors_metadata_checksum(edited, "checksums"),
            safetensors_metadata_checksum(meta, "checksums"));
}

TEST(Safetensors, AtomicWriteLeavesNoTemporary) {
  const std::string dir = testing::scratch_dir();
  const std::string path = dir + "/ckpt.safetensors";
  write_safetensors(path, {{"w", Tensor::full({3}, 1.0)}});
  write_safetensors(path, {{"w", Tensor::full({3}, 2.0)}});  // replaces the old file
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename());
  EXPECT_EQ(files, std::vector<std::string>{"ckpt.safetensors"});
  EXPECT_EQ(read_safetensors(path).get("w").to_vector<float>(), std::vector<float>(3, 2.0f));

  // A failing write throws naming the file, keeps the previous file, leaves no temporary.
  EXPECT_THROW(write_safetensors(path, {{"w", Tensor::zeros({1})}, {"w", Tensor::zeros({1})}}),
               Error);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", Tensor::zeros({1})}}), Error);
  try {
    write_safetensors(dir + "/no/such/dir/x.safetensors", {{"w", Tensor::zeros({1})}});
    FAIL() << "write into a missing directory must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/no/such/dir/x.safetensors"), std::string::npos)
        << e.what();
  }
  files.clear();
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().filename());
  EXPECT_EQ(files, std::vector<std::string>{"ckpt.safetensors"});
  EXPECT_EQ(read_safetensors(path).get("w").to_vector<float>(), std::vector<float>(3, 2.0f));
}

}  // namespace
}  // namespace driftless
