"""The emulated x64 machine: a unicorn CPU at CPL0, guest RAM shared with the VMM's doorbell
helper (a memfd both map), the driver image loaded and relocated, imports bound to Python
routines, calls into the driver, and x64 structured exception dispatch through the image's
.pdata/.xdata (so a missing or wrong __try scope is caught the way Windows would catch it).
"""
import ctypes
import mmap
import os
import struct

import pefile
from unicorn import Uc, UcError, UC_ARCH_X86, UC_MODE_64, UC_HOOK_CODE, UC_HOOK_INSN
from unicorn import UC_PROT_ALL, UC_HOOK_MEM_UNMAPPED
from unicorn.x86_const import (UC_X86_REG_RAX, UC_X86_REG_RBX, UC_X86_REG_RCX, UC_X86_REG_RDX,
                               UC_X86_REG_RSP, UC_X86_REG_RBP, UC_X86_REG_RSI, UC_X86_REG_RDI,
                               UC_X86_REG_R8, UC_X86_REG_R9, UC_X86_REG_R10, UC_X86_REG_R11,
                               UC_X86_REG_R12, UC_X86_REG_R13, UC_X86_REG_R14, UC_X86_REG_R15,
                               UC_X86_REG_RIP, UC_X86_INS_IN, UC_X86_INS_OUT)

PAGE = 4096
RAM_MIB = 64
# Guest RAM as the kernel sees it: the whole of it mapped at this virtual base (a direct map),
# so MmGetPhysicalAddress is a subtraction.
PHYS_VA = 0xFFFF_A000_0000_0000
STUBS_VA = 0xFFFF_F780_0010_0000      # one 16-byte trap per imported routine
STACK_VA = 0xFFFF_F780_0100_0000
STACK_SIZE = 0x40000
DATA_VA = 0xFFFF_F780_0200_0000       # ntoskrnl's exported variables (MmUserProbeAddress)
RETURN_VA = 0xFFFF_F780_0000_0000     # calls into the driver return here
IMAGE_VA = 0xFFFF_F800_1234_0000      # the driver is relocated here (not its preferred base)
GPR = [UC_X86_REG_RAX, UC_X86_REG_RCX, UC_X86_REG_RDX, UC_X86_REG_RBX, UC_X86_REG_RSP,
       UC_X86_REG_RBP, UC_X86_REG_RSI, UC_X86_REG_RDI, UC_X86_REG_R8, UC_X86_REG_R9,
       UC_X86_REG_R10, UC_X86_REG_R11, UC_X86_REG_R12, UC_X86_REG_R13, UC_X86_REG_R14,
       UC_X86_REG_R15]


class BugCheck(Exception):
    """The machine stopped: what Windows would show as a blue screen (code and parameters)."""

    def __init__(self, code, why, *params):
        super().__init__('bug check %#x: %s %s' % (code, why, ' '.join(hex(p) for p in params)))
        self.code = code


class Raise(Exception):
    """Raised by a Python kernel routine to raise an NT exception in the calling driver code."""

    def __init__(self, status):
        super().__init__('exception %#x' % status)
        self.status = status


class Machine:
    def __init__(self, ram_mib=RAM_MIB):
        self.ram_size = ram_mib << 20
        self.ram_fd = os.memfd_create('hvprof-guest-ram', 0)
        os.ftruncate(self.ram_fd, self.ram_size)
        self.ram = mmap.mmap(self.ram_fd, self.ram_size)
        self._ram_buf = (ctypes.c_char * self.ram_size).from_buffer(self.ram)
        self.uc = Uc(UC_ARCH_X86, UC_MODE_64)
        self.uc.mem_map_ptr(PHYS_VA, self.ram_size, UC_PROT_ALL, ctypes.addressof(self._ram_buf))
        for va, size in ((STUBS_VA, 0x10000), (STACK_VA, STACK_SIZE), (DATA_VA, PAGE),
                         (RETURN_VA, PAGE)):
            self.uc.mem_map(va, size)
        self.routines = {}          # stub address -> (name, python function)
        self._next_stub = STUBS_VA
        self.uc.hook_add(UC_HOOK_CODE, self._on_stub, begin=STUBS_VA, end=STUBS_VA + 0xFFFF)
        self.uc.hook_add(UC_HOOK_MEM_UNMAPPED, self._on_unmapped)
        self.fault = None
        self.pending = None         # an exception a routine raised, to dispatch after it
        self.depth = 0

    # ---- memory -------------------------------------------------------------------------
    def read(self, va, n):
        return bytes(self.uc.mem_read(va, n))

    def write(self, va, data):
        self.uc.mem_write(va, bytes(data))

    def u8(self, va):
        return self.read(va, 1)[0]

    def u16(self, va):
        return struct.unpack('<H', self.read(va, 2))[0]

    def u32(self, va):
        return struct.unpack('<I', self.read(va, 4))[0]

    def u64(self, va):
        return struct.unpack('<Q', self.read(va, 8))[0]

    def w32(self, va, v):
        self.write(va, struct.pack('<I', v & 0xFFFFFFFF))

    def w64(self, va, v):
        self.write(va, struct.pack('<Q', v & 0xFFFFFFFFFFFFFFFF))

    def phys_read(self, pa, n):
        return bytes(self.ram[pa:pa + n])

    def phys_write(self, pa, data):
        self.ram[pa:pa + len(data)] = bytes(data)

    def va_of(self, pa):
        return PHYS_VA + pa

    def pa_of(self, va):
        """The guest-physical address of a direct-map address, else None."""
        if PHYS_VA <= va < PHYS_VA + self.ram_size:
            return va - PHYS_VA
        return None

    # ---- the driver image ---------------------------------------------------------------
    def load(self, path, resolve):
        """Maps the PE at IMAGE_VA, applies its relocations and binds each import to
        `resolve(dll, name)`'s routine. Returns the pefile object."""
        pe = pefile.PE(path)
        size = (pe.OPTIONAL_HEADER.SizeOfImage + PAGE - 1) & ~(PAGE - 1)
        self.uc.mem_map(IMAGE_VA, size)
        self.image = (IMAGE_VA, size)
        pe.relocate_image(IMAGE_VA)
        self.write(IMAGE_VA, pe.header)
        for s in pe.sections:
            data = s.get_data()[:max(s.Misc_VirtualSize, 0) or len(s.get_data())]
            self.write(IMAGE_VA + s.VirtualAddress, data)
        for entry in getattr(pe, 'DIRECTORY_ENTRY_IMPORT', []):
            dll = entry.dll.decode().lower()
            for imp in entry.imports:
                name = imp.name.decode()
                slot = imp.address - pe.OPTIONAL_HEADER.ImageBase + IMAGE_VA \
                    if imp.address >= pe.OPTIONAL_HEADER.ImageBase else IMAGE_VA + imp.address
                self.w64(slot, resolve(dll, name))
        self.pe = pe
        self.pdata = []
        d = pe.OPTIONAL_HEADER.DATA_DIRECTORY[3]  # exception directory
        for i in range(d.Size // 12):
            b, e, u = struct.unpack('<III', self.read(IMAGE_VA + d.VirtualAddress + 12 * i, 12))
            self.pdata.append((b, e, u))
        return pe

    def symbol(self, name):
        for e in self.pe.DIRECTORY_ENTRY_EXPORT.symbols if hasattr(self.pe, 'DIRECTORY_ENTRY_EXPORT') else []:
            if e.name and e.name.decode() == name:
                return IMAGE_VA + e.address
        raise KeyError(name)

    def stub(self, name, fn):
        """A callable address that runs `fn(machine, args)` and returns its value in RAX."""
        va = self._next_stub
        self._next_stub += 16
        self.write(va, b'\xc3')  # never executed: the hook returns for it
        self.routines[va] = (name, fn)
        return va

    def data(self, offset, value):
        self.w64(DATA_VA + offset, value)
        return DATA_VA + offset

    def hook_instructions(self, cr3_fn, cpuid_fn, in_fn, out_fn):
        """CR3 reads and CPUID get a hook at each place they occur in the image's code (unicorn
        cannot hook them by opcode); IN and OUT are instruction hooks."""
        base, size = self.image
        code = self.read(base, size)
        for s in self.pe.sections:
            if not s.Characteristics & 0x20000000:  # IMAGE_SCN_MEM_EXECUTE
                continue
            lo, hi = s.VirtualAddress, s.VirtualAddress + s.Misc_VirtualSize
            for i in range(lo, hi - 2):
                if code[i] == 0x0F and code[i + 1] == 0x20 and code[i + 2] >> 6 == 3 \
                        and (code[i + 2] >> 3) & 7 == 3:
                    rex = code[i - 1] if 0x40 <= code[i - 1] <= 0x4F else 0
                    start = base + i - (1 if rex else 0)
                    reg = (code[i + 2] & 7) | (8 if rex & 1 else 0)
                    self._at(start, 3 + (1 if rex else 0),
                             lambda reg=reg: self.uc.reg_write(GPR[reg], cr3_fn()))
                if code[i] == 0x0F and code[i + 1] == 0xA2:
                    self._at(base + i, 2, lambda: self._cpuid(cpuid_fn))
        self.uc.hook_add(UC_HOOK_INSN, lambda uc, port, size, _: in_fn(port, size), None, 1, 0,
                         UC_X86_INS_IN)
        self.uc.hook_add(UC_HOOK_INSN, lambda uc, port, size, value, _: out_fn(port, size, value),
                         None, 1, 0, UC_X86_INS_OUT)

    def _at(self, va, length, fn):
        def hook(uc, addr, size, _):
            fn()
            uc.reg_write(UC_X86_REG_RIP, addr + length)
        self.uc.hook_add(UC_HOOK_CODE, hook, begin=va, end=va)

    def _cpuid(self, fn):
        leaf = self.uc.reg_read(UC_X86_REG_RAX) & 0xFFFFFFFF
        a, b, c, d = fn(leaf)
        for r, v in zip((UC_X86_REG_RAX, UC_X86_REG_RBX, UC_X86_REG_RCX, UC_X86_REG_RDX),
                        (a, b, c, d)):
            self.uc.reg_write(r, v)

    # ---- calls --------------------------------------------------------------------------
    def call(self, fn, *args):
        """Calls driver code `fn(args...)` (x64 convention) and returns RAX. Nested calls (a
        routine calling back into the driver) get their own stack area."""
        if self.depth > 3:
            raise BugCheck(0x7F, 'kernel stack overflow (call depth)')
        saved = [self.uc.reg_read(r) for r in GPR] + [self.uc.reg_read(UC_X86_REG_RIP)]
        top = STACK_VA + STACK_SIZE - self.depth * (STACK_SIZE // 4) - 0x100
        rsp = top - 8 * max(4, len(args)) - 8
        rsp &= ~0xF
        rsp -= 8  # the return address: RSP+8 is 16-byte aligned at entry
        self.w64(rsp, RETURN_VA + self.depth)
        for i, a in enumerate(args[4:]):
            self.w64(rsp + 8 + 32 + 8 * i, a)
        self.uc.reg_write(UC_X86_REG_RSP, rsp)
        for r, a in zip((UC_X86_REG_RCX, UC_X86_REG_RDX, UC_X86_REG_R8, UC_X86_REG_R9), args):
            self.uc.reg_write(r, a & 0xFFFFFFFFFFFFFFFF)
        self.depth += 1
        try:
            self._run(fn, RETURN_VA + self.depth - 1)
            return self.uc.reg_read(UC_X86_REG_RAX)
        finally:
            self.depth -= 1
            if self.depth > 0:
                for r, v in zip(GPR, saved):
                    self.uc.reg_write(r, v)
                self.uc.reg_write(UC_X86_REG_RIP, saved[-1])

    def _run(self, start, until):
        pc = start
        while True:
            self.fault = None
            try:
                self.uc.emu_start(pc, until)
            except UcError as e:
                if self.fault:
                    raise self.fault
                raise BugCheck(0x1E, 'KMODE_EXCEPTION_NOT_HANDLED (%s)' % e,
                               self.uc.reg_read(UC_X86_REG_RIP))
            if self.fault:
                raise self.fault
            if self.pending is None:
                return
            status, at = self.pending
            self.pending = None
            pc = self._dispatch_exception(status, at)

    def _on_unmapped(self, uc, access, addr, size, value, _):
        self.fault = BugCheck(0x50, 'PAGE_FAULT_IN_NONPAGED_AREA', addr,
                              uc.reg_read(UC_X86_REG_RIP))
        return False

    def _on_stub(self, uc, addr, size, _):
        if addr not in self.routines:
            return
        name, fn = self.routines[addr]
        rsp = uc.reg_read(UC_X86_REG_RSP)
        ret = self.u64(rsp)
        args = [uc.reg_read(r) for r in (UC_X86_REG_RCX, UC_X86_REG_RDX, UC_X86_REG_R8,
                                         UC_X86_REG_R9)]
        args += [self.u64(rsp + 8 + 32 + 8 * i) for i in range(4)]
        try:
            value = fn(self, args)
        except Raise as r:
            # Unwind out of the routine: the exception is raised at its return address.
            uc.reg_write(UC_X86_REG_RSP, rsp + 8)
            self.pending = (r.status, ret)
            uc.emu_stop()
            return
        except BugCheck as b:
            self.fault = b
            uc.emu_stop()
            return
        except Exception as e:  # a harness bug: stop loudly
            self.fault = e
            uc.emu_stop()
            return
        if value is not None:
            uc.reg_write(UC_X86_REG_RAX, value & 0xFFFFFFFFFFFFFFFF)
        uc.reg_write(UC_X86_REG_RSP, rsp + 8)
        uc.reg_write(UC_X86_REG_RIP, ret)

    # ---- structured exception handling (x64) --------------------------------------------
    def _function(self, pc):
        base, size = self.image
        if not base <= pc < base + size:
            return None
        rva = pc - base
        for b, e, u in self.pdata:
            if b <= rva < e:
                return b, u
        return None

    def _dispatch_exception(self, status, pc):
        """Windows' dispatcher for an exception raised at `pc` (the return address into the
        raising frame): walk the frames by their unwind data; the first language handler that
        is ntoskrnl's __C_specific_handler with a scope covering the frame's PC and the
        EXCEPTION_EXECUTE_HANDLER filter takes it: the frame is unwound to, RIP is the scope's
        target and EAX the exception code. No handler: bug check 0x1E."""
        rsp = self.uc.reg_read(UC_X86_REG_RSP)
        regs = {i: self.uc.reg_read(GPR[i]) for i in range(16)}
        for _ in range(64):
            f = self._function(pc)
            if f is None:
                break
            begin, unwind = f
            handler = self._scope_handler(begin, unwind, pc)
            if handler is not None:
                self.uc.reg_write(UC_X86_REG_RSP, rsp)
                self.uc.reg_write(UC_X86_REG_RAX, status)
                return handler
            rsp, regs = self._unwind(begin, unwind, pc, rsp, regs)
            pc = self.u64(rsp)
            rsp += 8
        raise BugCheck(0x1E, 'KMODE_EXCEPTION_NOT_HANDLED', status, pc)

    def _scope_handler(self, begin, unwind, pc):
        base = self.image[0]
        info = base + unwind
        flags = self.u8(info) >> 3
        if not flags & 1:  # UNW_FLAG_EHANDLER
            return None
        codes = self.u8(info + 2)
        after = info + 4 + 2 * ((codes + 1) & ~1)
        handler = base + self.u32(after)
        if not self.is_c_specific_handler(handler):
            return None
        table = after + 4
        for i in range(self.u32(table)):
            b, e, h, t = struct.unpack('<IIII', self.read(table + 4 + 16 * i, 16))
            if b <= pc - base < e and h == 1 and t != 0:
                return base + t
        return None

    def is_c_specific_handler(self, va):
        """True if `va` is __C_specific_handler: its stub, or an import thunk (jmp [slot])."""
        if self.routines.get(va, ('',))[0] == '__C_specific_handler':
            return True
        code = self.read(va, 6)
        if code[:2] == b'\xff\x25':
            slot = va + 6 + struct.unpack('<i', code[2:6])[0]
            return self.routines.get(self.u64(slot), ('',))[0] == '__C_specific_handler'
        return False

    def _unwind(self, begin, unwind, pc, rsp, regs):
        base = self.image[0]
        info = base + unwind
        prolog = self.u8(info + 1)
        codes = self.u8(info + 2)
        frame = self.u8(info + 3)
        i = 0
        in_prolog = pc - base - begin
        while i < codes:
            off, op = self.u8(info + 4 + 2 * i), self.u8(info + 5 + 2 * i)
            kind, opinfo = op & 0xF, op >> 4
            slots = {0: 1, 1: 2 if opinfo == 0 else 3, 2: 1, 3: 1, 4: 2, 5: 3, 8: 2, 9: 3,
                     10: 1}.get(kind, 1)
            applies = in_prolog >= off or in_prolog >= prolog
            if applies:
                if kind == 0:      # UWOP_PUSH_NONVOL
                    regs[opinfo] = self.u64(rsp)
                    rsp += 8
                elif kind == 1:    # UWOP_ALLOC_LARGE
                    n = self.u16(info + 4 + 2 * (i + 1))
                    rsp += n * 8 if opinfo == 0 else self.u32(info + 4 + 2 * (i + 1))
                elif kind == 2:    # UWOP_ALLOC_SMALL
                    rsp += opinfo * 8 + 8
                elif kind == 3:    # UWOP_SET_FPREG
                    rsp = regs[frame & 0xF] - (frame >> 4) * 16
                elif kind in (4, 5):  # UWOP_SAVE_NONVOL(_FAR)
                    n = self.u16(info + 4 + 2 * (i + 1))
                    regs[opinfo] = self.u64(rsp + (n * 8 if kind == 4 else
                                                   self.u32(info + 4 + 2 * (i + 1))))
                elif kind == 10:   # UWOP_PUSH_MACHFRAME
                    raise BugCheck(0x1E, 'machine frame in driver code', pc)
            i += slots
        if self.u8(info) >> 3 & 4:  # UNW_FLAG_CHAININFO
            after = info + 4 + 2 * ((codes + 1) & ~1)
            cb, ce, cu = struct.unpack('<III', self.read(after, 12))
            return self._unwind(cb, cu, base + cb + 0x7FFFFFFF, rsp, regs)
        return rsp, regs
