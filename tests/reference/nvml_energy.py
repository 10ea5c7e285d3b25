"""The current CUDA device's energy counter (NVML's total energy since the driver loaded), in
joules, as `driftless bench` reads it (engine/core/cuda/energy.cpp): libnvidia-ml.so.1
through ctypes, the device found by its PCI bus id. `energy_joules()` is None where there is
no counter. Differences are meaningful over a second or more (the driver refreshes the
counter every few tens of milliseconds)."""
import ctypes

_nvml = None
_handles = {}


def _lib():
    global _nvml
    if _nvml is None:
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            _nvml = lib if lib.nvmlInit_v2() == 0 else False
        except OSError:
            _nvml = False
    return _nvml


def energy_joules():
    import torch
    lib = _lib()
    if not lib or not torch.cuda.is_available():
        return None
    dev = torch.cuda.current_device()
    if dev not in _handles:
        p = torch.cuda.get_device_properties(dev)
        bus = f"{p.pci_domain_id:08x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0".encode()
        h = ctypes.c_void_p()
        ok = lib.nvmlDeviceGetHandleByPciBusId_v2(ctypes.c_char_p(bus), ctypes.byref(h)) == 0
        _handles[dev] = h if ok else None
    h = _handles[dev]
    if h is None:
        return None
    mj = ctypes.c_ulonglong()
    if lib.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(mj)) != 0:
        return None
    return mj.value / 1000.0
