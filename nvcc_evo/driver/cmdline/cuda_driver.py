"""The CUDA driver, asked through libcuda itself (ctypes: no PyCUDA), whether
it loads a cubin: the only sure test that a ptxas of another release makes
code this machine runs (a driver of CUDA 13.0 loads cubins of ptxas 13.5).
"""
from __future__ import annotations

import ctypes


def _library() -> ctypes.CDLL | None:
    for name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _error_name(cuda: ctypes.CDLL, code: int) -> str:
    text = ctypes.c_char_p()
    if cuda.cuGetErrorName(code, ctypes.byref(text)) == 0 and text.value:
        return text.value.decode()
    return f"CUDA error {code}"


def driver_version() -> str | None:
    """"13.0" for the driver of CUDA 13.0; None without a driver."""
    cuda = _library()
    version = ctypes.c_int()
    if cuda is None or cuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def load_problem(cubin: bytes, device: int = 0) -> str | None:
    """Why the driver does not load `cubin` on `device` ("" when it does;
    None when there is no driver or no device to ask)."""
    cuda = _library()
    if cuda is None or cuda.cuInit(0) != 0:
        return None
    handle, context, module = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p()
    if cuda.cuDeviceGet(ctypes.byref(handle), device) != 0:
        return None
    if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), handle) != 0:
        return None
    try:
        cuda.cuCtxPushCurrent_v2(context)
        code = cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(cubin))
        if code != 0:
            return f"{_error_name(cuda, code)} (driver of CUDA {driver_version()})"
        cuda.cuModuleUnload(module)
        return ""
    finally:
        cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        cuda.cuDevicePrimaryCtxRelease_v2(handle)


def device_count() -> int | None:
    """How many CUDA devices the driver sees; None without a driver (or one that does not start)."""
    cuda = _library()
    count = ctypes.c_int()
    if cuda is None or cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None
    return count.value


COMPUTE_CAPABILITY = (75, 76)      # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, _MINOR


def device_archs() -> tuple[str, ...] | None:
    """Each visible CUDA device's architecture (`sm_90`); None without a driver (or one that does
    not say)."""
    cuda = _library()
    count = ctypes.c_int()
    if cuda is None or cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return None
    archs = []
    for index in range(count.value):
        handle = ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(handle), index) != 0:
            return None
        capability = [ctypes.c_int(), ctypes.c_int()]
        for value, attribute in zip(capability, COMPUTE_CAPABILITY):
            if cuda.cuDeviceGetAttribute(ctypes.byref(value), attribute, handle) != 0:
                return None
        archs.append(f"sm_{capability[0].value}{capability[1].value}")
    return tuple(archs)
