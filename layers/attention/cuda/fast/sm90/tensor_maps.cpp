// Host side of tensor_maps.h: the driver entry point, looked up once, and the map encoding.
#include "layers/attention/cuda/fast/sm90/tensor_maps.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include "engine/core/cuda/check.h"
#include "engine/core/error.h"

namespace driftless::layers::gpu::fast::sm90 {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult status{};
    DL_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000,
                                                   cudaEnableDefault, &status));
    DL_CHECK(f != nullptr && status == cudaDriverEntryPointSuccess, "attention",
             "the CUDA driver has no cuTensorMapEncodeTiled (status " << int(status) << ")");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

}  // namespace

namespace {

// A 3-D map (head_dim, heads, rows) of elements of `bytes` bytes, boxes of box_cols x 1 x
// box_rows (box_cols x bytes = 128: the 128-byte swizzle's row).
void encode_map(void* map128, CUtensorMapDataType type, int bytes, int box_cols, const void* base,
                int64_t rows, int64_t heads, int64_t row_heads, int64_t head_dim, int box_rows) {
  static_assert(sizeof(CUtensorMap) == 128, "a tensor map is 128 bytes");
  const cuuint64_t dims[3] = {cuuint64_t(head_dim), cuuint64_t(heads), cuuint64_t(rows)};
  const cuuint64_t strides[2] = {cuuint64_t(head_dim * bytes),
                                 cuuint64_t(row_heads * head_dim * bytes)};
  const cuuint32_t box[3] = {cuuint32_t(box_cols), 1, cuuint32_t(box_rows)};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult r =
      encode_fn()(static_cast<CUtensorMap*>(map128), type, 3, const_cast<void*>(base), dims,
                  strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DL_CHECK(r == CUDA_SUCCESS, "attention",
           "cuTensorMapEncodeTiled refused a map of " << rows << " rows x " << heads << " heads x "
                                                      << head_dim << " (row stride " << row_heads
                                                      << " heads, error " << int(r) << ")");
}

}  // namespace

void encode_rows_map(void* map128, const void* base, int64_t rows, int64_t heads, int64_t row_heads,
                     int64_t head_dim, int box_rows) {
  encode_map(map128, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, 64, base, rows, heads, row_heads,
             head_dim, box_rows);
}

void encode_f32_rows_map(void* map128, const void* base, int64_t rows, int64_t heads,
                         int64_t head_dim, int box_rows) {
  encode_map(map128, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, 32, base, rows, heads, heads, head_dim,
             box_rows);
}

int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    DL_CUDA_CHECK(cudaGetDevice(&dev));
    DL_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev));
    return count;
  }();
  return n;
}

}  // namespace driftless::layers::gpu::fast::sm90
