// Helpers for the op tests: f64 random inputs, element-wise comparison against expected
// values, and EXPECT_DL_ERROR, which checks that a statement throws driftless::Error whose
// message contains every given substring (the op name, the shapes).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/core/tensor.h"
#include "tests/gradcheck.h"

namespace driftless::testing {

inline Tensor rnd(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  return Tensor::randn(shape, seed, dtype);
}

inline ::testing::AssertionResult all_close(const Tensor& t, const std::vector<double>& want,
                                            double tol = 1e-12) {
  std::vector<double> got = t.to_vector<double>();
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs expected " << want.size();
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i]))))
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", expected " << want[i];
  return ::testing::AssertionSuccess();
}

template <class F>
::testing::AssertionResult throws_with(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& p : parts)
      if (m.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << m << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-driftless exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// rms(t - r) / rms(r), the drift metric of ARCHITECTURE.md.
inline double rms_rel(const Tensor& t, const Tensor& r) {
  auto a = t.to_vector<double>(), b = r.to_vector<double>();
  double d = 0, s = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    s += b[i] * b[i];
  }
  return std::sqrt(d / (s + 1e-300));
}

}  // namespace driftless::testing

#define EXPECT_DL_ERROR(stmt, ...) \
  EXPECT_TRUE(::driftless::testing::throws_with([&] { (void)(stmt); }, {__VA_ARGS__}))
