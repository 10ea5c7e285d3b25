// Run-time compiled attention kernels on the GPU (jit_launch.h): program -> kernel cache
// (compile with NVRTC on a miss) -> module loaded through the driver (entry points fetched from
// the runtime, as sm90/tensor_maps.cpp does, so nothing links libcuda) -> launches; prefetch
// fetches the programs of calls known ahead, several at a time.
#include "layers/attention/jit/jit_launch.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "engine/core/cuda/check.h"
#include "engine/core/cuda/stream.h"
#include "engine/core/env.h"
#include "engine/core/error.h"
#include "layers/attention/jit/attention_program.h"
#include "layers/attention/jit/kernel_cache.h"
#include "layers/attention/jit/nvrtc_compile.h"

namespace driftless::layers::jit {
namespace {

constexpr const char* kOp = "attention";

struct Driver {
  PFN_cuModuleLoadData_v2000 load = nullptr;
  PFN_cuModuleGetFunction_v2000 get_function = nullptr;
  PFN_cuModuleUnload_v2000 unload = nullptr;
  PFN_cuFuncSetAttribute_v9000 set_attribute = nullptr;
  PFN_cuLaunchKernelEx_v11060 launch = nullptr;
  PFN_cuGetErrorString_v6000 error_string = nullptr;
};

template <class F>
void entry(const char* name, int version, F* out) {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult status{};
  DL_CUDA_CHECK(cudaGetDriverEntryPointByVersion(name, &f, version, cudaEnableDefault, &status));
  DL_CHECK(f != nullptr && status == cudaDriverEntryPointSuccess, kOp,
           "the CUDA driver has no " << name << " (status " << int(status) << ")");
  *out = reinterpret_cast<F>(f);
}

const Driver& driver() {
  static const Driver d = [] {
    Driver x;
    entry("cuModuleLoadData", 2000, &x.load);
    entry("cuModuleGetFunction", 2000, &x.get_function);
    entry("cuModuleUnload", 2000, &x.unload);
    entry("cuFuncSetAttribute", 9000, &x.set_attribute);
    entry("cuLaunchKernelEx", 11060, &x.launch);
    entry("cuGetErrorString", 6000, &x.error_string);
    return x;
  }();
  return d;
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* s = nullptr;
  driver().error_string(r, &s);
  DL_FAIL(kOp, what << " failed: " << (s != nullptr ? s : "unknown CUDA driver error"));
}

// The module of one compiled program and its kernels (AttentionProgram::kernels' order).
struct LoadedProgram {
  CUmodule module = nullptr;
  std::vector<CUfunction> functions;
  // Per function, the dynamic shared memory its attribute allows so far (launch raises it only
  // when a launch needs more: the built-in kernels set it once too), raised under smem_mutex
  // so that the attribute only grows.
  mutable std::unique_ptr<std::atomic<int>[]> smem_allowed;
  mutable std::mutex smem_mutex;
  LoadedProgram() = default;
  LoadedProgram(const LoadedProgram&) = delete;
  LoadedProgram& operator=(const LoadedProgram&) = delete;
  // Evicted (or at exit): the device finishes what it runs first, which may be this module's
  // kernels; errors are ignored (at exit the context may be gone).
  ~LoadedProgram() {
    if (module == nullptr) return;
    (void)cudaDeviceSynchronize();
    driver().unload(module);
  }
};

Loaded load(const std::string& binary) {
  const CompiledProgram c = from_binary(binary);
  DL_CUDA_CHECK(cudaFree(nullptr));  // the runtime's primary context, current on this thread
  auto lp = std::make_shared<LoadedProgram>();
  check(driver().load(&lp->module, c.cubin.data()),
        "cuModuleLoadData (a run-time compiled kernel)");
  for (const std::string& name : c.lowered) {
    CUfunction f = nullptr;
    check(driver().get_function(&f, lp->module, name.c_str()), "cuModuleGetFunction");
    lp->functions.push_back(f);
  }
  lp->smem_allowed = std::make_unique<std::atomic<int>[]>(lp->functions.size());  // zeros
  return lp;
}

// make_program and its cache key, remembered per (spec, emitted functor): the key holds every
// kernel header, so building it, or hashing it, takes longer than a launch. Never freed: a run
// has a few (an expression's literals are fixed; its tables, learnable or not, are pointers).
struct MadeProgram {
  AttentionProgram program;
  KernelKey key;
};
const MadeProgram& program(const expr::Program& score, const expr::Program* mask,
                           const ProgramSpec& spec) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const MadeProgram>> memo;
  const std::string id = std::string(pass_name(spec.pass)) + " " + std::to_string(spec.head_dim) +
                         (spec.wgmma ? " wgmma " : " mma ") + spec.arch + " runs " +
                         std::to_string(spec.grad_runs) + (spec.shifted ? " shifted" : "") + "\n" +
                         score.functor_text +
                         (mask != nullptr ? "mask\n" + mask->functor_text : "");
  std::lock_guard<std::mutex> lock(mutex);
  auto it = memo.find(id);
  if (it != memo.end()) return *it->second;
  AttentionProgram made = make_program(score, spec, mask);
  KernelKey key(std::move(made.key));  // its 146 KB text kept once, in the KernelKey
  auto p = std::make_shared<const MadeProgram>(MadeProgram{std::move(made), std::move(key)});
  memo.emplace(id, p);
  return *p;
}

// The spec of an expression's program for `pass` on the current device.
ProgramSpec program_spec(Pass pass, int head_dim, bool shifted) {
  ProgramSpec spec;
  spec.pass = pass;
  spec.head_dim = head_dim;
  spec.wgmma = gpu::fast::use_wgmma();
  spec.arch = device_arch();
  // DRIFTLESS_GRAD_RUNS=n: n register runs in the learnable tables' accumulator (0: one
  // atomic pair a contribution; a test compares the bits of both).
  if (const std::string runs = env_value("DRIFTLESS_GRAD_RUNS"); !runs.empty())
    spec.grad_runs = std::atoi(runs.c_str());
  spec.shifted = shifted;
  return spec;
}

// The loaded kernels of a made program, through the process kernel cache.
std::shared_ptr<const LoadedProgram> fetch(const MadeProgram& made) {
  const AttentionProgram& prog = made.program;
  auto lp = std::static_pointer_cast<const LoadedProgram>(process_kernel_cache().get(
      made.key, [&] { return to_binary(compile_program(prog)); }, load));
  DL_CHECK(lp->functions.size() == prog.kernels.size(), kOp,
           "a cached attention program has " << lp->functions.size() << " kernels, not "
                                             << prog.kernels.size());
  return lp;
}

// The loaded program of (expression, pass) on the current device, and its modifier's bytes.
struct Kernels {
  std::shared_ptr<const LoadedProgram> program;
  std::vector<unsigned char> mod;
};

Kernels kernels(const BoundExpr& e, Pass pass, const gpu::Problem& p) {
  DL_CHECK(e.score != nullptr, kOp, "no score expression bound");
  const MadeProgram& made = program(
      *e.score, e.mask, program_spec(pass, int(p.head_dim), e.shift_q != 0 || e.shift_k != 0));
  Kernels k;
  k.program = fetch(made);
  k.mod = pack_mod(made.program, *e.score, e.params, e.head_offset, p.scale, e.grad_acc, e.shift_q,
                   e.shift_k, e.mask);
  return k;
}

// One launch as cuda::launch makes it (launch.cuh): the compute stream, programmatic dependent
// launch where the device and DRIFTLESS_PDL allow it (these kernels are compiled for the
// device itself, so their dependent_kernel_begin() waits).
void launch(const LoadedProgram& lp, size_t i, const gpu::fast::Geometry& g, void** args) {
  CUfunction f = lp.functions[i];
  std::atomic<int>& allowed = lp.smem_allowed[i];
  if (int(g.smem) > allowed.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(lp.smem_mutex);
    if (int(g.smem) > allowed.load(std::memory_order_relaxed)) {
      check(driver().set_attribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, g.smem),
            "cuFuncSetAttribute (dynamic shared memory)");
      allowed.store(int(g.smem), std::memory_order_release);
    }
  }
  CUlaunchConfig config = {};
  config.gridDimX = g.grid;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = g.block;
  config.blockDimY = config.blockDimZ = 1;
  config.sharedMemBytes = unsigned(g.smem);
  config.hStream = reinterpret_cast<CUstream>(cuda::compute_stream());
  CUlaunchAttribute attribute[1] = {};
  attribute[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  attribute[0].value.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = cuda::dependent_launch_enabled() ? 1 : 0;
  check(driver().launch(&config, f, args, nullptr),
        "cuLaunchKernelEx (a run-time compiled kernel)");
  DL_CUDA_LAUNCH_CHECK();
}

}  // namespace

std::string device_arch() {
  int dev = 0;
  DL_CUDA_CHECK(cudaGetDevice(&dev));
  // Asked once per device: every launch keys its program by it.
  static std::mutex mutex;
  static std::map<int, std::string> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = known.find(dev); it != known.end()) return it->second;
  int major = 0, minor = 0;
  DL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  DL_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  return known[dev] = "sm_" + std::to_string(major) + std::to_string(minor) +
                      (major == 9 && minor == 0 ? "a" : "");
}

void forward(const gpu::Problem& p, const BoundExpr& e, const gpu::fast::Tile* tiles, int n_tiles,
             bool padded, void* out, float* lse) {
  Kernels k = kernels(e, Pass::forward, p);
  gpu::fast::ModLauncher l;
  l.heavy = expr::heavy(*e.score);  // the functor's kHeavy: the kernel's tile shapes
  // The kernels' parameters in order (mma_sync/forward_kernel.cuh; sm90/fwd_kernel.cuh with its
  // maps first and the item count before out).
  l.forward = [&](const gpu::fast::Geometry& g, const gpu::fast::ForwardArgs& a) {
    gpu::Problem pp = a.p;
    const gpu::fast::Tile* t = a.tiles;
    int n_items = a.n_items;
    void* o = a.out;
    float* s = a.lse;
    if (a.maps != nullptr) {
      std::vector<void*> args = {
          const_cast<void*>(a.maps), &pp, k.mod.data(), &t, &n_items, &o, &s};
      launch(*k.program, 0, g, args.data());
    } else {
      std::vector<void*> args = {&pp, k.mod.data(), &t, &o, &s};
      launch(*k.program, 0, g, args.data());
    }
  };
  gpu::fast::forward_with(p, l, tiles, n_tiles, padded, out, lse);
}

void backward(const gpu::Problem& p, const BoundExpr& e, const gpu::fast::Tile* q_tiles,
              int n_q_tiles, const gpu::fast::Tile* k_tiles, int n_k_tiles, bool q_padded,
              bool k_padded, const void* out, const void* dout, const float* lse, float* delta,
              void* dq, void* dk, void* dv, gpu::fast::OutRows rows, float* dq_acc) {
  const bool atomic = dq_acc != nullptr && gpu::fast::use_wgmma();
  const int64_t learnables = e.score != nullptr ? e.score->param_count : 0;
  DL_CHECK(learnables == 0 || (e.grad_acc != nullptr && e.dparams != nullptr), kOp,
           "an expression with learnable tables needs its gradient's sums and output");
  // The dK/dV CTA's shared accumulator of the learnables, past the kernel's own bytes
  // (mma_sync/fast_dkv.cuh).
  const int64_t slots = learnables > 0 ? expr::grad_slots(*e.score, p.heads / p.kv_heads) : 0;
  DL_CHECK(slots <= expr::kMaxGradSlots, kOp,
           "learnable score_mod tables on cuda: a dK/dV block keeps the entries its "
               << p.heads / p.kv_heads << " query heads read, at most " << expr::kMaxGradSlots
               << ", and this expression has " << slots << "; use cpu tensors");
  Kernels k = kernels(e, atomic ? Pass::backward_atomic : Pass::backward, p);
  gpu::fast::ModLauncher l;
  // Pass::backward holds dq_kernel then dkv_kernel; Pass::backward_atomic its dkv_kernel only.
  l.dq = [&](const gpu::fast::Geometry& g, const gpu::fast::DqArgs& a) {
    DL_CHECK(!atomic, kOp, "the atomic-dQ backward runs no dQ kernel");
    gpu::Problem pp = a.p;
    const gpu::fast::Tile* t = a.tiles;
    const void *d_o = a.dout, *o = a.out;
    const float* s = a.lse;
    float* dl = a.delta;
    void* g_q = a.dq;
    int heads = a.dq_heads;
    void* args[] = {&pp, k.mod.data(), &t, &d_o, &o, &s, &dl, &g_q, &heads};
    launch(*k.program, 0, g, args);
  };
  l.dkv = [&](const gpu::fast::Geometry& g, const gpu::fast::DkvArgs& a) {
    DL_CHECK(a.atomic == atomic, kOp, "the backward's mode changed between compile and launch");
    gpu::Problem pp = a.p;
    const gpu::fast::Tile* t = a.tiles;
    const void* d_o = a.dout;
    const float *s = a.lse, *dl = a.delta;
    void *g_k = a.dk, *g_v = a.dv;
    int heads = a.dkv_heads;
    float* acc = a.dq_acc;
    void* args[] = {&pp, k.mod.data(), &t, &d_o, &s, &dl, &g_k, &g_v, &heads, &acc};
    gpu::fast::Geometry gs = g;
    if (learnables > 0)  // the kept entries and the overflow word's pair
      gs.smem = (g.smem + 15) / 16 * 16 + int(slots + 1) * gpu::fast::kGradSlotBytes;
    launch(*k.program, atomic ? 0 : 1, gs, args);
  };
  gpu::fast::backward_with(p, l, q_tiles, n_q_tiles, k_tiles, n_k_tiles, q_padded, k_padded, out,
                           dout, lse, delta, dq, dk, dv, rows, dq_acc);
  if (learnables > 0) {  // param_grad_to_f32, the program's last kernel
    const unsigned long long* sums = e.grad_acc;
    float* grad = e.dparams;
    long long n = learnables;
    void* args[] = {&sums, &grad, &n};
    launch(*k.program, k.program->functions.size() - 1, {unsigned((n + 255) / 256), 256, 0}, args);
  }
}

size_t prefetch(const std::vector<ProgramUse>& uses, int threads) {
  int dev = 0;
  DL_CUDA_CHECK(cudaGetDevice(&dev));
  std::vector<std::shared_ptr<const expr::Program>> identities;  // alive while programs are made
  std::vector<const MadeProgram*> todo;
  for (const ProgramUse& u : uses) {
    DL_CHECK(u.score != nullptr || u.mask != nullptr, kOp, "a program use without an expression");
    const expr::Program* score = u.score;
    if (score == nullptr) {
      identities.push_back(identity_score(*u.mask));
      score = identities.back().get();
    }
    // The backward's pass as backward() picks it: an atomic-dQ call (attention_cuda.cpp: not
    // deterministic, and gpu::fast::atomic_dq()) on the wgmma kernels.
    const bool atomic = !u.deterministic && gpu::fast::atomic_dq() && gpu::fast::use_wgmma();
    for (Pass pass : {Pass::forward, atomic ? Pass::backward_atomic : Pass::backward}) {
      const MadeProgram* made = &program(*score, u.mask, program_spec(pass, u.head_dim, u.shifted));
      if (std::none_of(todo.begin(), todo.end(),
                       [&](const MadeProgram* t) { return t->key == made->key; }))
        todo.push_back(made);
    }
  }
  std::atomic<size_t> next{0};
  std::mutex failed_mutex;
  std::exception_ptr failed;
  auto work = [&] {
    try {
      DL_CUDA_CHECK(cudaSetDevice(dev));  // the caller's device: the modules load there
      for (size_t i = next++; i < todo.size(); i = next++) fetch(*todo[i]);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failed_mutex);
      if (!failed) failed = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  const size_t n = std::min(todo.size(), size_t(std::max(threads, 1)));
  for (size_t i = 0; i < n; ++i) pool.emplace_back(work);
  for (std::thread& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
  return todo.size();
}

}  // namespace driftless::layers::jit
