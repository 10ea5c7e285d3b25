// cuda::energy_joules (device_ops.h): NVML's total-energy counter of the current CUDA device.
// libnvidia-ml ships with the driver, not the toolkit, so it is opened at run time (no link
// dependency); the device is found by its PCI bus id, so CUDA_VISIBLE_DEVICES renumbering
// does not pick another GPU's counter.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <limits>
#include <map>
#include <mutex>

#include "engine/core/cuda/check.h"
#include "engine/core/device_ops.h"

namespace driftless::cuda {

namespace {

using NvmlDevice = void*;
using InitFn = int (*)();
using ByBusIdFn = int (*)(const char*, NvmlDevice*);
using EnergyFn = int (*)(NvmlDevice, unsigned long long*);  // millijoules

struct Nvml {
  ByBusIdFn by_bus_id = nullptr;
  EnergyFn energy = nullptr;
  std::string error;  // why NVML is unusable ("" when usable)
};

const Nvml& nvml() {
  static const Nvml n = [] {
    Nvml r;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      r.error = "libnvidia-ml.so.1 not found (NVML comes with the NVIDIA driver)";
      return r;
    }
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
    r.by_bus_id = reinterpret_cast<ByBusIdFn>(dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    r.energy = reinterpret_cast<EnergyFn>(dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
    if (!init || !r.by_bus_id || !r.energy)
      r.error = "this NVML lacks nvmlInit_v2, the PCI bus id lookup or the energy counter";
    else if (const int rc = init(); rc != 0)
      r.error = "nvmlInit_v2 failed (NVML error " + std::to_string(rc) + ")";
    return r;
  }();
  return n;
}

}  // namespace

double energy_joules(std::string* why) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto fail = [&](const std::string& reason) {
    if (why) *why = reason;
    return nan;
  };
  if (device_count() == 0) return fail("no CUDA device");
  const Nvml& n = nvml();
  if (!n.error.empty()) return fail(n.error);
  int dev = 0;
  DL_CUDA_CHECK(cudaGetDevice(&dev));
  static std::mutex mu;
  static std::map<int, NvmlDevice> handles;  // per CUDA device; nullptr: no NVML device
  NvmlDevice h = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = handles.find(dev);
    if (it == handles.end()) {
      char bus[32] = {};
      DL_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, int(sizeof(bus)), dev));
      if (n.by_bus_id(bus, &h) != 0) h = nullptr;
      it = handles.emplace(dev, h).first;
    }
    h = it->second;
  }
  if (h == nullptr) return fail("NVML does not know the current CUDA device's PCI bus id");
  unsigned long long mj = 0;
  if (const int rc = n.energy(h, &mj); rc != 0)
    return fail("this GPU has no energy counter (NVML error " + std::to_string(rc) + ")");
  if (why) why->clear();
  return double(mj) * 1e-3;
}

}  // namespace driftless::cuda
