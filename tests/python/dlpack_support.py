"""DLPack capsules made by hand (ctypes), for tests of what takes arrays by DLPack without a GPU."""

from __future__ import annotations

import ctypes


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLManagedTensor(ctypes.Structure):  # DLPack's, as torch exports a tensor
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


def dlpack(address: int, device_type: int, floats: int) -> tuple[object, tuple]:
    """A DLPack capsule of `floats` float32 at `address` on `device_type` (1 CPU, 2 CUDA, 3 CUDA
    pinned host, 4 OpenCL), and what must outlive it."""
    shape = (ctypes.c_int64 * 1)(floats)
    t = DLManagedTensor(address, DLDevice(device_type, 0), 1, DLDataType(2, 32, 1), shape, None, 0, None, None)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(t), b"dltensor", None), (t, shape)
