// Validation before any work (ARCHITECTURE.md "Errors"): every malformed input raises
// driftless::Error "[attention] ..." naming the offending index and values.
#include <gtest/gtest.h>

#include "layers/attention/attention.h"

namespace driftless::layers {
namespace {

Tensor i32(std::vector<int32_t> v) {
  return Tensor::from_vector(v);
}

struct Call {
  Tensor q = Tensor::randn({12, 4, 8}, 1);
  Tensor k = Tensor::randn({12, 2, 8}, 2);
  Tensor v = Tensor::randn({12, 2, 8}, 3);
  AttentionSpec spec = AttentionSpec::from_lengths({5, 7}, {5, 7}, true);
};

// Runs the forward and expects an Error whose message contains `want`.
void expect_error(const Call& c, const std::string& want) {
  try {
    attention_forward(c.q, c.k, c.v, c.spec);
    ADD_FAILURE() << "no error, expected: " << want;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("[attention]"), std::string::npos) << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << "got: " << msg << "\nwant: " << want;
  }
}

TEST(AttentionValidation, ValidCallPasses) {
  Call c;
  EXPECT_NO_THROW(attention_forward(c.q, c.k, c.v, c.spec));
}

TEST(AttentionValidation, CuSeqlens) {
  Call c;
  c.spec.cu_seqlens_q = i32({1, 5, 12});
  expect_error(c, "cu_seqlens_q[0] = 1, expected 0");
  c = Call();
  c.spec.cu_seqlens_q = i32({0, 7, 5, 12});
  c.spec.cu_seqlens_k = i32({0, 3, 5, 12});
  expect_error(c, "cu_seqlens_q[2] = 5 is smaller than cu_seqlens_q[1] = 7");
  c = Call();
  c.spec.cu_seqlens_k = i32({0, 5, 10});
  expect_error(c, "cu_seqlens_k[2] = 10, expected the rows of k (T_k) = 12");
  c = Call();
  c.spec.cu_seqlens_q = Tensor::from_vector(std::vector<int64_t>{0, 5, 12});
  expect_error(c, "cu_seqlens_q must be i32, got i64");
  c = Call();
  c.spec.cu_seqlens_k = i32({0, 12});
  expect_error(c, "cu_seqlens_q lists 2 documents, cu_seqlens_k 1");
  c = Call();
  c.spec.cu_seqlens_q = Tensor();
  expect_error(c, "cu_seqlens_q is required");
}

TEST(AttentionValidation, MaxSeqlen) {
  Call c;
  c.spec.max_seqlen_q = 6;
  expect_error(c, "max_seqlen_q = 6 is smaller than the length 7 of document 1");
  c = Call();
  c.spec.max_seqlen_k = 0;
  expect_error(c, "max_seqlen_k = 0 is smaller than the length 5 of document 0");
}

TEST(AttentionValidation, Padding) {
  Call c;
  c.spec.cu_seqlens_q = i32({0, 5, 11});
  c.spec.cu_seqlens_q_padded = i32({0, 4, 12});
  expect_error(c, "document 0 has 5 real q rows but only 4 rows of memory (offsets 0..4)");
  c = Call();
  c.spec.cu_seqlens_k_padded = i32({0, 6, 13});
  expect_error(c, "cu_seqlens_k_padded[2] = 13, expected the rows of k (T_k) = 12");
  c = Call();
  c.spec.cu_seqlens_q = i32({0, 5, 10});
  c.spec.cu_seqlens_q_padded = i32({0, 6, 12});
  c.spec.seqused_q = i32({5, 4});
  expect_error(c, "seqused_q[1] = 4 disagrees with cu_seqlens_q[2] - cu_seqlens_q[1] = 5");
  c = Call();
  c.spec.seqused_k = i32({5});
  expect_error(c, "seqused_k has 1 entries, expected 2");
  c = Call();
  c.spec.seqused_k = i32({6, 7});
  expect_error(c, "document 0 has 6 real k rows but only 5 rows of memory");
}

TEST(AttentionValidation, Shapes) {
  Call c;
  c.k = Tensor::randn({12, 2, 8}, 2, DType::f64);
  c.v = Tensor::randn({12, 2, 8}, 3, DType::f64);
  expect_error(c, "q, k, v must share a dtype, got f32, f64, f64");
  c = Call();
  c.v = Tensor::randn({12, 2, 4}, 3);
  expect_error(c, "v must have the shape of k [12, 2, 8], got [12, 2, 4]");
  c = Call();
  c.k = Tensor::randn({12, 2, 4}, 2);
  c.v = Tensor::randn({12, 2, 4}, 3);
  expect_error(c, "head dim of k (4) must match q (8)");
  c = Call();
  c.k = Tensor::randn({12, 3, 8}, 2);
  c.v = Tensor::randn({12, 3, 8}, 3);
  expect_error(c, "H = 4 query heads must be a multiple of H_kv = 3");
  c = Call();
  c.q = Tensor::randn({12, 32}, 1);
  expect_error(c, "q must be (T_q, H, D), got shape [12, 32]");
  c = Call();
  c.q = Tensor::zeros({12, 4, 8}, DType::i32);
  expect_error(c, "q must be floating");
}

TEST(AttentionValidation, OptionsAndModifiers) {
  Call c;
  c.spec.window_left = -2;
  expect_error(c, "window (-2, -1) must be -1 (unbounded) or >= 0");
  c = Call();
  c.spec.score_mod = ScoreModSpec::make_softcap(0.0);
  expect_error(c, "softcap must be positive and finite, got 0");
  c = Call();
  c.spec.score_mod = ScoreModSpec::make_alibi(Tensor::ones({3}));
  expect_error(c, "alibi slopes must be floating (H) = (4), got [3]");
  c = Call();
  c.spec.score_mod = ScoreModSpec::make_relative_position(Tensor::zeros({4, 5}), 3);
  expect_error(
      c, "relative_position table must be floating (H, 2 * max_distance + 1) = (4, 7), got [4, 5]");
  c = Call();
  c.spec.bias = Tensor::zeros({4, 12, 5});
  expect_error(c, "bias dim 2 is 5, expected 12 or 1 (bias shape [4, 12, 5])");
  c = Call();
  c.spec.bias = Tensor::zeros({12, 12});
  expect_error(c, "bias must be floating (H|1, T_q|1, T_k|1)");
}

TEST(AttentionValidation, BackwardArguments) {
  Call c;
  auto f = attention_forward(c.q, c.k, c.v, c.spec);
  try {
    attention_backward(c.q, c.k, c.v, c.spec, f.out, f.lse, Tensor::zeros({12, 4, 7}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d_out must be [12, 4, 8], got [12, 4, 7]"),
              std::string::npos)
        << e.what();
  }
  try {
    attention_backward(c.q, c.k, c.v, c.spec, f.out, Tensor::zeros({12, 4}), f.out);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lse must be (H, T_q) = (4, 12), got [12, 4]"),
              std::string::npos)
        << e.what();
  }
}

TEST(AttentionValidation, UserFunctorNeedsNoBuiltinModifier) {
  Call c;
  c.spec.score_mod = ScoreModSpec::make_softcap(1.0);
  try {
    attention_forward_with(c.q, c.k, c.v, c.spec, score_mod::None<float>{});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be none, got softcap"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace driftless::layers
