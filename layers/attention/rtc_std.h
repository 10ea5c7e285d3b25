// The few standard-library names the fast attention kernels use, for both compilers: the
// real headers under nvcc and the host compiler; under NVRTC (__CUDACC_RTC__, which ships no
// C++ library), minimal equivalents, so the same kernel headers compile at run time (jit/).
#pragma once
#ifndef __CUDACC_RTC__
#include <math.h>

#include <cstdint>
#include <type_traits>
#else
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#ifndef INFINITY
// A constant expression, as nvcc's INFINITY is (+inf: the float product overflows). Written as
// __int_as_float(0x7f800000), a call until it is inlined, `if (masked) x = -INFINITY` in the
// forward's element pass became a branch around each pair's value instead of a select
// (331 branches in the sm_90a forward's PTX against nvcc's 75 for the same source; the ALiBi
// expression's forward ran ~10% slower than the built-in).
#define INFINITY (1e38f * 1e38f)
#endif
namespace std {
template <class T, T v>
struct integral_constant {
  static constexpr T value = v;
};
using true_type = integral_constant<bool, true>;
using false_type = integral_constant<bool, false>;
template <class A, class B>
struct is_same : false_type {};
template <class A>
struct is_same<A, A> : true_type {};
template <class A, class B>
inline constexpr bool is_same_v = is_same<A, B>::value;
template <class T>
struct remove_reference {
  using type = T;
};
template <class T>
struct remove_reference<T&> {
  using type = T;
};
template <class T>
struct remove_reference<T&&> {
  using type = T;
};
template <class T>
using remove_reference_t = typename remove_reference<T>::type;
template <class T>
struct extent : integral_constant<unsigned long long, 0> {};
template <class T, unsigned long long N>
struct extent<T[N]> : integral_constant<unsigned long long, N> {};
template <class T>
inline constexpr unsigned long long extent_v = extent<T>::value;
}  // namespace std
#endif
