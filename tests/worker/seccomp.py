"""A real refusal of a system call for a test's child process: a seccomp filter, as a strict container
profile or an older kernel would refuse it. Installed between fork and exec (``preexec_fn``); the filter
outlives the exec and binds every process the child starts."""

from __future__ import annotations

import ctypes
import errno
import struct

PIDFD_OPEN = 434  # the same number on x86-64 and arm64 (every architecture since Linux 5.3)
_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_RET_ERRNO, _RET_ALLOW = 0x0005_0000, 0x7FFF_0000
_LOAD_NR, _JUMP_IF_EQUAL, _RETURN = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def refuse(syscall: int, error: int) -> None:
    """From now on this process (and what it starts) gets ``error`` from ``syscall``, everything else as before."""
    rules = [(_LOAD_NR, 0, 0, 0),  # the system call's number (offset 0 of seccomp_data)
             (_JUMP_IF_EQUAL, 0, 1, syscall),
             (_RETURN, 0, 0, _RET_ERRNO | error),
             (_RETURN, 0, 0, _RET_ALLOW)]
    code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *rule) for rule in rules))
    program = _Program(len(rules), ctypes.addressof(code))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(
            _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0):
        raise OSError(ctypes.get_errno(), "cannot install the seccomp filter")


def refuse_pidfd_open() -> None:
    refuse(PIDFD_OPEN, errno.ENOSYS)
