// Which keys a query row sees (ARCHITECTURE.md "Causal alignment"), shared by the CPU and CUDA
// kernels. Masks decide visibility before any score modifier runs; within one document the
// visible keys of a row are always one contiguous range, so a row is described by [lo, hi].
#pragma once
#include "layers/attention/host_device.h"
#include "layers/attention/rtc_std.h"

namespace driftless::layers {

// Position of query row i (0 <= i < n_q) of a document in key coordinates: queries are
// aligned bottom-right, i.e. the last query row sits at the last key. This is the position
// of the query token inside its document when the K extent starts at the document start.
DL_HOST_DEVICE inline int64_t query_position(int64_t i, int64_t n_q, int64_t n_k) {
  return i + n_k - n_q;
}

// Visible key range [lo, hi] (key rows within the document) of query row i; empty when
// lo > hi. window_left / window_right of -1 mean unbounded; causal is the same as a right
// window of 0, and the two combine by intersection.
// In any integer type I (the CUDA kernels use 32 bits, where every value involved fits).
template <class I>
DL_HOST_DEVICE inline void visible_key_range(I i, I n_q, I n_k, bool causal, I window_left,
                                             I window_right, I* lo, I* hi) {
  const I p = i + n_k - n_q;  // query_position
  I a = 0;
  I b = n_k - 1;
  if (causal && p < b) b = p;
  // (compared as differences: p + window would overflow for windows near the type's max)
  if (window_right >= 0 && window_right < b - p) b = p + window_right;
  if (window_left >= 0 && window_left < p - a) a = p - window_left;
  *lo = a;
  *hi = b;
}
// A window (-1: unbounded) as the 32-bit value visible_key_range<int> takes for a document of
// n_q query and n_k key rows: a window of n_q + n_k or more bounds nothing on either side
// (every key is within it of every query position), so it is clamped to that. Lengths below
// 2^29 keep every sum in range.
DL_HOST_DEVICE inline int window_in_32_bits(int64_t window, int64_t n_q, int64_t n_k) {
  return window < 0 ? -1 : int(window < n_q + n_k ? window : n_q + n_k);
}

// The query rows that may see key j, the inverse of visible_key_range: from
// first_visible_query (the causal bound and the right window) to last_visible_query (the left
// window), both never decreasing with j; windows as visible_key_range takes them (-1:
// unbounded; clamped by window_in_32_bits for 32-bit I). Empty where first > last.
template <class I>
DL_HOST_DEVICE inline I first_visible_query(I j, I n_q, I n_k, bool causal, I window_right) {
  const I shift = n_k - n_q;
  I i = 0;
  if (causal && j - shift > i) i = j - shift;
  if (window_right >= 0 && j - window_right - shift > i) i = j - window_right - shift;
  return i;
}
template <class I>
DL_HOST_DEVICE inline I last_visible_query(I j, I n_q, I n_k, I window_left) {
  I i = n_q - 1;
  if (window_left >= 0 && j + window_left - (n_k - n_q) < i) i = j + window_left - (n_k - n_q);
  return i;
}

DL_HOST_DEVICE inline void visible_keys(int64_t i, int64_t n_q, int64_t n_k, bool causal,
                                        int64_t window_left, int64_t window_right, int64_t* lo,
                                        int64_t* hi) {
  visible_key_range<int64_t>(i, n_q, n_k, causal, window_left, window_right, lo, hi);
}

}  // namespace driftless::layers
