// The replay file format (layers/attention/replay.h): a dumped call replays to exactly the
// results of calling the op directly; malformed call files are errors.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/core/device_ops.h"
#include "engine/core/safetensors.h"
#include "layers/attention/attention.h"
#include "layers/attention/replay.h"
#include "tests/layers/attention_test_util.h"
#include "tests/test_paths.h"

namespace driftless::testing {
namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.raw_data(), y.raw_data(), x.nbytes()) == 0;
}

layers::AttentionCall make_call() {
  Case c;
  c.docs = {{20, 70, 3, 5}, {0, 0, 2, 0}, {33, 33, 0, 4}};
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.padding = Padding::padded_cu;
  c.mod = ModKind::relpos;
  c.bias = BiasKind::rows;
  c.window_left = 9;
  c.scale = 0.3;
  Inputs in = make_inputs(c);
  layers::AttentionCall call;
  call.spec = spec_in(in.spec, DType::f32);
  call.q = in.q.to(DType::f32);
  call.k = in.k.to(DType::f32);
  call.v = in.v.to(DType::f32);
  call.d_out = in.dout.to(DType::f32);
  call.info["info.layer"] = "3";
  return call;
}

TEST(AttentionReplay, RoundTripGivesTheDirectResults) {
  const std::string dir = scratch_dir();
  layers::AttentionCall call = make_call();
  call.spec.first_doc_shift = {4, 6};  // a ring call's: the relative positions move
  layers::write_attention_call(dir + "/call.safetensors", call);
  layers::replay_attention_file(dir + "/call.safetensors", dir + "/result.safetensors", "cpu");

  auto f = layers::attention_forward(call.q, call.k, call.v, call.spec);
  auto g = layers::attention_backward(call.q, call.k, call.v, call.spec, f.out, f.lse, call.d_out);
  SafetensorsFile r = read_safetensors(dir + "/result.safetensors");
  EXPECT_TRUE(same_bits(r.get("out"), f.out));
  EXPECT_TRUE(same_bits(r.get("lse"), f.lse));
  EXPECT_TRUE(same_bits(r.get("dq"), g.dq));
  EXPECT_TRUE(same_bits(r.get("dk"), g.dk));
  EXPECT_TRUE(same_bits(r.get("dv"), g.dv));
  EXPECT_TRUE(same_bits(r.get("dbias"), g.dbias));
  EXPECT_TRUE(same_bits(r.get("d_relative_position_table"), g.dscore_mod));
  EXPECT_EQ(r.metadata().at("info.layer"), "3");
  EXPECT_EQ(r.metadata().at("device"), "cpu");
  EXPECT_EQ(r.metadata().at("score_mod"), "relative_position");
  EXPECT_EQ(r.metadata().at("deterministic"), "true");
  call.spec.deterministic = false;  // the non-deterministic backward's calls replay as such
  layers::write_attention_call(dir + "/call2.safetensors", call);
  EXPECT_FALSE(layers::read_attention_call(dir + "/call2.safetensors").spec.deterministic);
}

TEST(AttentionReplay, ForwardOnlyWithoutDOut) {
  const std::string dir = scratch_dir();
  layers::AttentionCall call = make_call();
  call.d_out = Tensor();
  layers::write_attention_call(dir + "/call.safetensors", call);
  auto r = layers::replay_attention(layers::read_attention_call(dir + "/call.safetensors"), "cpu");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].first, "out");
  EXPECT_EQ(r[1].first, "lse");
}

TEST(AttentionReplay, MalformedCallsAreErrors) {
  const std::string dir = scratch_dir();
  layers::AttentionCall call = make_call();
  Tensor q = call.q;
  write_safetensors(dir + "/bad_key.safetensors",
                    {{"q", q},
                     {"k", call.k},
                     {"v", call.v},
                     {"cu_seqlens_q", call.spec.cu_seqlens_q},
                     {"cu_seqlens_k", call.spec.cu_seqlens_k}},
                    {{"casual", "true"}});
  EXPECT_THROW(layers::read_attention_call(dir + "/bad_key.safetensors"), Error);
  write_safetensors(dir + "/missing.safetensors", {{"q", q}, {"k", call.k}, {"v", call.v}});
  try {
    layers::read_attention_call(dir + "/missing.safetensors");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor \"cu_seqlens_q\" is missing"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(layers::replay_attention(call, "gpu"), Error);
  if (cuda::device_count() == 0) {  // without a GPU, cuda is a clear error (not a crash)
    EXPECT_THROW(layers::replay_attention(call, "cuda"), Error);
  }
}

}  // namespace
}  // namespace driftless::testing
