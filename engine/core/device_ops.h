// The few device primitives engine/core needs from a backend: allocation, elementwise
// copy with dtype conversion, fill and accumulate. The CPU bodies live in tensor.cpp; the
// CUDA bodies in engine/core/cuda/, or a stub that throws when built without CUDA.
#pragma once
#include <string>

#include "engine/core/tensor.h"

namespace driftless::cuda {

bool built_with_cuda();
int device_count();         // 0 when built without CUDA or no GPU is present
std::string device_name();  // the current GPU's name ("" without one)
Allocator& allocator();
// dst and src have the same shape; either may live on cpu, at least one on cuda.
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
void add_(const Tensor& dst, const Tensor& src);
// dst = a + b for contiguous, 16-byte aligned tensors of one dtype whose size is whole
// 16-byte units; false (nothing done) otherwise.
bool add_units(const Tensor& dst, const Tensor& a, const Tensor& b);
void synchronize();
MemoryStats memory_stats();  // the caching allocator's counters
void reset_peak_memory();
void empty_cache();  // frees the caching allocator's unused blocks (cudaFree)
// The current GPU's energy counter in joules (NVML's total energy since the driver loaded,
// read through libnvidia-ml.so.1 loaded at run time), or NaN where there is none: built
// without CUDA, no NVML library, or a GPU without the counter (*why, if given, says which).
// The driver refreshes the counter every few tens of milliseconds: differences are meaningful
// over spans of a second or more. Under a power cap a run's speed follows its energy per step.
double energy_joules(std::string* why = nullptr);

}  // namespace driftless::cuda
