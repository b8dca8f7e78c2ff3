"""Emulated user processes: a token, and an address space whose x64 page tables live in guest RAM
(so the VMM's own page walker reads them), with Windows' demand-zero commit: a committed page
has no valid PTE until it is first touched (written, read, or faulted in by a probe)."""
import struct

PTE_P, PTE_RW, PTE_US = 1, 2, 4
ADDR = 0x000F_FFFF_FFFF_F000
SE_SYSTEM_PROFILE_PRIVILEGE = 11


class Frames:
    """Guest-physical page allocator over RAM above 2 MiB (below that the map has holes)."""

    def __init__(self, machine):
        self.m = machine
        self.free = list(range(0x200, machine.ram_size // 4096))
        # Hand frames out from both ends alternately, so consecutive pages of a buffer are
        # never physically contiguous (the driver must use the MDL's PFN array).
        self.flip = False

    def take(self):
        self.flip = not self.flip
        f = self.free.pop(0 if self.flip else -1)
        self.m.phys_write(f * 4096, bytes(4096))
        return f

    def give(self, f):
        self.free.append(f)


class Process:
    def __init__(self, machine, frames, pid, privileges=()):
        self.m, self.frames, self.pid = machine, frames, pid
        self.cr3 = frames.take() << 12
        # privilege LUID -> enabled; an elevated administrator holds SeSystemProfilePrivilege
        # disabled until the program enables it (AdjustTokenPrivileges).
        self.privileges = {p: False for p in privileges}
        self.committed = {}          # page VA -> writable
        self.next_va = 0x0000_0200_0000_0000 + pid * 0x1_0000_0000
        self.locked = {}             # frame -> lock count (MmProbeAndLockPages)
        self.exited = False

    # ---- token -----------------------------------------------------------------------------
    def enable(self, luid):
        """AdjustTokenPrivileges: only a held privilege can be enabled."""
        if luid not in self.privileges:
            return False
        self.privileges[luid] = True
        return True

    def privilege_enabled(self, luid):
        return self.privileges.get(luid, False)

    # ---- address space -------------------------------------------------------------------
    def virtual_alloc(self, size, writable=True):
        """MEM_COMMIT of `size` bytes: demand-zero pages, none present yet."""
        va = self.next_va
        pages = (size + 4095) // 4096
        self.next_va += (pages + 16) * 4096
        for i in range(pages):
            self.committed[va + i * 4096] = writable
        return va

    def decommit(self, va, size):
        """VirtualFree(MEM_DECOMMIT): the pages vanish; a locked page cannot be freed."""
        for page in range(va & ~0xFFF, va + size, 4096):
            self.committed.pop(page, None)
            pte = self._pte(page, create=False)
            if pte and self.m.u64(self.m.va_of(pte)) & PTE_P:
                self.m.phys_write(pte, bytes(8))

    def _pte(self, va, create):
        table = self.cr3
        for shift in (39, 30, 21):
            at = table + ((va >> shift) & 0x1FF) * 8
            e = struct.unpack('<Q', self.m.phys_read(at, 8))[0]
            if not e & PTE_P:
                if not create:
                    return None
                e = (self.frames.take() << 12) | PTE_P | PTE_RW | PTE_US
                self.m.phys_write(at, struct.pack('<Q', e))
            table = e & ADDR
        return table + ((va >> 12) & 0x1FF) * 8

    def translate(self, va):
        """The present PTE's frame for `va`, or None (not present)."""
        pte = self._pte(va & ~0xFFF, create=False)
        if pte is None:
            return None
        e = struct.unpack('<Q', self.m.phys_read(pte, 8))[0]
        return (e & ADDR) >> 12 if e & PTE_P else None

    def fault_in(self, va, write):
        """The page fault handler: makes a committed page present. False: access violation."""
        page = va & ~0xFFF
        if page not in self.committed or (write and not self.committed[page]):
            return False
        if self.translate(page) is None:
            f = self.frames.take()
            bits = PTE_P | PTE_US | (PTE_RW if self.committed[page] else 0)
            self.m.phys_write(self._pte(page, create=True), struct.pack('<Q', (f << 12) | bits))
        return True

    def write(self, va, data):
        """A store by the program (faults pages in as the CPU would)."""
        for i, b in enumerate(bytes(data)):
            if not self.fault_in(va + i, True):
                raise MemoryError('access violation writing %#x' % (va + i))
            self.m.phys_write(self.translate(va + i) * 4096 + ((va + i) & 0xFFF), bytes([b]))

    def read(self, va, n):
        out = bytearray()
        for i in range(n):
            if not self.fault_in(va + i, False):
                raise MemoryError('access violation reading %#x' % (va + i))
            out += self.m.phys_read(self.translate(va + i) * 4096 + ((va + i) & 0xFFF), 1)
        return bytes(out)
