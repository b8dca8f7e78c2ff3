"""The NT kernel routines hvprof.sys imports, modelled on their documented behaviour, with the
checks Driver Verifier would make: IRQL ceilings, lock balance, each IRP completed once, pool
and MDL leaks, locked pages at process exit. A violation is a BugCheck, as on Windows."""
import struct
import subprocess

from .machine import BugCheck, Raise, Machine, PHYS_VA
from .process import Frames, Process, SE_SYSTEM_PROFILE_PRIVILEGE

PASSIVE, APC, DISPATCH = 0, 1, 2
STATUS_SUCCESS = 0
STATUS_ACCESS_VIOLATION = 0xC0000005
STATUS_INSUFFICIENT_RESOURCES = 0xC000009A
STATUS_PENDING = 0x103
MM_USER_PROBE_ADDRESS = 0x7FFF_FFFF_0000
MDL_PAGES_LOCKED = 0x2
DOORBELL_BASE = 0x6A0


class Vmm:
    """The VMM's side, run by the real Rust code (vmm/examples/emu_doorbell.rs) over our RAM."""

    def __init__(self, helper, machine):
        self.p = subprocess.Popen([helper, '--ram-mib', str(machine.ram_size >> 20),
                                   '--ram-fd', str(machine.ram_fd)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  pass_fds=(machine.ram_fd,), text=True)
        self.rings = []

    def ask(self, line):
        self.p.stdin.write(line + '\n')
        self.p.stdin.flush()
        answer = self.p.stdout.readline().strip()
        if not answer:
            raise RuntimeError('the doorbell helper died on: ' + line)
        return answer

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)
        self.p.stdout.close()


class Kernel:
    def __init__(self, helper):
        self.m = Machine()
        self.frames = Frames(self.m)
        self.vmm = Vmm(helper, self.m)
        self.irql = PASSIVE
        self.system = Process(self.m, self.frames, 4)
        self.processes = {4: self.system}
        self.current = self.system        # the thread's process
        self.attached = None              # KeStackAttachProcess
        self.pool = {}                    # va -> (size, tag)
        self.contiguous = {}              # va -> size
        self.mdls = {}                    # va -> {'locked': frames or None, 'process': p}
        self.mutexes = {}                 # va -> holder count
        self.spin = {}                    # va -> held
        self.devices = {}                 # va -> name
        self.links = {}
        self.notify = None
        self.completed = {}               # irp va -> completions
        self.calls = []                   # routine names, in order
        self.rings = []                   # (irql, status) per doorbell ring
        self.fail = {}                    # routine name -> failures to inject (countdown)
        self._heap = 0x0010_0000          # kernel structures we allocate (not the driver's)
        self.routines = {n[3:]: getattr(self, n) for n in dir(self) if n.startswith('nt_')}

    # ---- plumbing --------------------------------------------------------------------------
    def resolve(self, dll, name):
        if dll != 'ntoskrnl.exe':
            raise BugCheck(0xCE, 'import from %s' % dll)
        if name == 'MmUserProbeAddress':
            return self.m.data(0, MM_USER_PROBE_ADDRESS)
        fn = self.routines.get(name)
        if fn is None:
            raise KeyError('the emulated kernel lacks %s' % name)
        return self.m.stub(name, lambda m, a, fn=fn, name=name: self._enter(name, fn, a))

    def _enter(self, name, fn, args):
        self.calls.append(name)
        return fn(args)

    def ceiling(self, name, highest):
        if self.irql > highest:
            raise BugCheck(0xA, 'IRQL_NOT_LESS_OR_EQUAL: %s at IRQL %d' % (name, self.irql))

    def injected(self, name):
        n = self.fail.get(name)
        if n is None:
            return False
        if n == 0:
            del self.fail[name]
            return True
        self.fail[name] = n - 1
        return False

    def kalloc(self, size):
        """Kernel-owned nonpaged memory (IRPs, objects the I/O manager makes)."""
        pa = self._heap
        self._heap += (size + 15) & ~15
        self.m.phys_write(pa, bytes(size))
        return PHYS_VA + pa

    def ustr(self, va):
        """A UNICODE_STRING, by its Length (not up to a NUL)."""
        length, maximum, buf = struct.unpack('<HHxxxxQ', self.m.read(va, 16))
        if length % 2 or length > maximum:
            raise BugCheck(0xC2, 'malformed UNICODE_STRING', va)
        return self.m.read(buf, length).decode('utf-16-le')

    def _nonpaged_alloc(self, size):
        pages = (size + 4095) // 4096
        frames = [self.frames.free.pop(0) for _ in range(pages)]
        if frames != list(range(frames[0], frames[0] + pages)):
            raise RuntimeError('contiguous allocation is not contiguous')
        self.m.phys_write(frames[0] * 4096, bytes(pages * 4096))
        return PHYS_VA + frames[0] * 4096

    def _nonpaged_free(self, va, size):
        for i in range((size + 4095) // 4096):
            self.frames.give((va - PHYS_VA) // 4096 + i)

    # ---- memory ----------------------------------------------------------------------------
    def nt_ExAllocatePoolWithTag(self, a):
        self.ceiling('ExAllocatePoolWithTag', DISPATCH)
        if self.injected('ExAllocatePoolWithTag'):
            return 0
        va = self._nonpaged_alloc(a[1])
        self.pool[va] = (a[1], a[2] & 0xFFFFFFFF)
        return va

    def nt_ExFreePoolWithTag(self, a):
        self.ceiling('ExFreePoolWithTag', DISPATCH)
        va, tag = a[0], a[1] & 0xFFFFFFFF
        if va not in self.pool:
            raise BugCheck(0xC2, 'BAD_POOL_CALLER: freeing %#x, not allocated' % va)
        if self.pool[va][1] != tag:
            raise BugCheck(0xC2, 'BAD_POOL_CALLER: tag mismatch', va)
        size, _ = self.pool.pop(va)
        self._nonpaged_free(va, size)

    def nt_MmAllocateContiguousMemory(self, a):
        self.ceiling('MmAllocateContiguousMemory', PASSIVE)
        if self.injected('MmAllocateContiguousMemory'):
            return 0
        va = self._nonpaged_alloc(a[0])
        if self.m.pa_of(va) + a[0] - 1 > a[1]:
            raise RuntimeError('above HighestAcceptableAddress')
        self.contiguous[va] = a[0]
        return va

    def nt_MmFreeContiguousMemory(self, a):
        self.ceiling('MmFreeContiguousMemory', PASSIVE)
        if a[0] not in self.contiguous:
            raise BugCheck(0xC2, 'freeing contiguous memory not allocated', a[0])
        self._nonpaged_free(a[0], self.contiguous.pop(a[0]))

    def nt_MmGetPhysicalAddress(self, a):
        pa = self.m.pa_of(a[0])
        return 0 if pa is None else pa

    def nt_IoAllocateMdl(self, a):
        self.ceiling('IoAllocateMdl', DISPATCH)
        va, length = a[0], a[1] & 0xFFFFFFFF
        if a[4] != 0 or a[2] != 0:
            raise RuntimeError('IoAllocateMdl with an IRP is not modelled')
        if self.injected('IoAllocateMdl') or length == 0:
            return 0
        pages = ((va & 0xFFF) + length + 4095) // 4096
        mdl = self.nt_ExAllocatePoolWithTag([0, 0x30 + 8 * pages, 0x6C644D49])
        del self.pool[mdl]
        self.m.write(mdl, struct.pack('<QhhHHQQQII', 0, 0x30 + 8 * pages, 0, 0, 0, 0, 0,
                                      va & ~0xFFF, length, va & 0xFFF))
        self.mdls[mdl] = {'locked': None, 'size': 0x30 + 8 * pages}
        return mdl

    def nt_IoFreeMdl(self, a):
        self.ceiling('IoFreeMdl', DISPATCH)
        mdl = self.mdls.get(a[0])
        if mdl is None:
            raise BugCheck(0xC2, 'IoFreeMdl of an unknown MDL', a[0])
        if mdl['locked'] is not None:
            raise BugCheck(0x76, 'freeing an MDL whose pages are still locked', a[0])
        del self.mdls[a[0]]
        self._nonpaged_free(a[0], mdl['size'])

    def nt_MmProbeAndLockPages(self, a):
        """UserMode: the range must lie below MmUserProbeAddress and every page be committed
        (and writable for IoWriteAccess) in the current process; each page is faulted in and
        locked. Otherwise STATUS_ACCESS_VIOLATION is raised, as Windows raises it."""
        self.ceiling('MmProbeAndLockPages', APC)
        mdl, mode, op = a[0], a[1] & 0xFF, a[2] & 0xFFFFFFFF
        if mdl not in self.mdls or self.mdls[mdl]['locked'] is not None:
            raise BugCheck(0x4E, 'probing an unknown or locked MDL', mdl)
        start = self.m.u64(mdl + 0x20) + self.m.u32(mdl + 0x2C)
        length = self.m.u32(mdl + 0x28)
        proc = self.attached or self.current
        if mode == 1 and (start + length > MM_USER_PROBE_ADDRESS or start + length < start):
            raise Raise(STATUS_ACCESS_VIOLATION)
        frames = []
        for page in range(start & ~0xFFF, start + length, 4096):
            if not proc.fault_in(page, write=(op != 0)):
                raise Raise(STATUS_ACCESS_VIOLATION)
            frames.append(proc.translate(page))
        for i, f in enumerate(frames):
            self.m.w64(mdl + 0x30 + 8 * i, f)
            proc.locked[f] = proc.locked.get(f, 0) + 1
        self.m.write(mdl + 0xA, struct.pack('<h', MDL_PAGES_LOCKED))
        self.m.w64(mdl + 0x10, 0)
        self.mdls[mdl]['locked'] = (proc, frames)

    def nt_MmUnlockPages(self, a):
        self.ceiling('MmUnlockPages', DISPATCH)
        mdl = self.mdls.get(a[0])
        if mdl is None or mdl['locked'] is None:
            raise BugCheck(0x4E, 'MmUnlockPages of an MDL that is not locked', a[0])
        proc, frames = mdl['locked']
        for f in frames:
            proc.locked[f] -= 1
            if not proc.locked[f]:
                del proc.locked[f]
        mdl['locked'] = None
        self.m.write(a[0] + 0xA, struct.pack('<h', 0))

    # ---- synchronisation -------------------------------------------------------------------
    def nt_KeInitializeMutex(self, a):
        self.ceiling('KeInitializeMutex', PASSIVE)
        self.mutexes[a[0]] = 0

    def nt_KeWaitForSingleObject(self, a):
        if a[0] not in self.mutexes:
            raise RuntimeError('waiting on an object other than the driver mutex')
        if a[4] == 0:  # no timeout: must be below DISPATCH_LEVEL
            self.ceiling('KeWaitForSingleObject', APC)
        if self.mutexes[a[0]]:
            raise BugCheck(0xD4, 'deadlock: the single thread waits on a mutex it holds')
        self.mutexes[a[0]] = 1
        return STATUS_SUCCESS

    def nt_KeReleaseMutex(self, a):
        self.ceiling('KeReleaseMutex', DISPATCH)
        if not self.mutexes.get(a[0]):
            raise BugCheck(0x40, 'MUTEX_NOT_OWNED', a[0])
        self.mutexes[a[0]] = 0
        return 0

    def nt_KeAcquireSpinLockRaiseToDpc(self, a):
        self.ceiling('KeAcquireSpinLockRaiseToDpc', DISPATCH)
        if self.spin.get(a[0]):
            raise BugCheck(0xF, 'SPIN_LOCK_ALREADY_OWNED', a[0])
        self.spin[a[0]] = True
        old, self.irql = self.irql, DISPATCH
        return old

    def nt_KeReleaseSpinLock(self, a):
        if not self.spin.get(a[0]):
            raise BugCheck(0x10, 'SPIN_LOCK_NOT_OWNED', a[0])
        if self.irql != DISPATCH:
            raise BugCheck(0xA, 'KeReleaseSpinLock below DISPATCH_LEVEL')
        self.spin[a[0]] = False
        self.irql = a[1] & 0xFF

    # ---- processes and security ------------------------------------------------------------
    def nt_SeSinglePrivilegeCheck(self, a):
        self.ceiling('SeSinglePrivilegeCheck', PASSIVE)
        luid = a[0] & 0xFFFFFFFF
        # Only an *enabled* privilege counts (a held but disabled one does not).
        return 1 if self.current.privilege_enabled(luid) else 0

    def nt_PsGetCurrentProcessId(self, a):
        return self.current.pid

    def nt_PsLookupProcessByProcessId(self, a):
        self.ceiling('PsLookupProcessByProcessId', APC)
        p = self.processes.get(a[0])
        if p is None or p.exited:
            return 0xC000000B  # STATUS_INVALID_CID
        self.refs = getattr(self, 'refs', 0) + 1
        obj = self.kalloc(16)
        self.m.w64(obj, p.pid)
        self.m.w64(a[1], obj)
        return STATUS_SUCCESS

    def nt_ObfDereferenceObject(self, a):
        self.refs -= 1
        if self.refs < 0:
            raise BugCheck(0x18, 'REFERENCE_BY_POINTER: dereferencing too often')
        return 0

    def nt_KeStackAttachProcess(self, a):
        self.ceiling('KeStackAttachProcess', APC)
        if self.attached is not None:
            raise BugCheck(0x5, 'nested attach without a matching detach')
        self.attached = self.processes[self.m.u64(a[0])]

    def nt_KeUnstackDetachProcess(self, a):
        if self.attached is None:
            raise BugCheck(0x5, 'detach without attach')
        self.attached = None

    def nt_PsSetCreateProcessNotifyRoutine(self, a):
        self.ceiling('PsSetCreateProcessNotifyRoutine', PASSIVE)
        if a[1] & 0xFF:
            if self.notify != a[0]:
                return 0xC000000D
            self.notify = None
            return STATUS_SUCCESS
        if self.injected('PsSetCreateProcessNotifyRoutine'):
            return 0xC000000D
        self.notify = a[0]
        return STATUS_SUCCESS

    def nt_KeBugCheckEx(self, a):
        raise BugCheck(a[0] & 0xFFFFFFFF, 'KeBugCheckEx from the driver', *a[1:5])

    def nt___C_specific_handler(self, a):
        raise RuntimeError('__C_specific_handler is run by the dispatcher, not called')

    # ---- devices ---------------------------------------------------------------------------
    def nt_IoCreateDevice(self, a):
        self.ceiling('IoCreateDevice', PASSIVE)
        if self.injected('IoCreateDevice'):
            return STATUS_INSUFFICIENT_RESOURCES
        drv, ext, name = a[0], a[1] & 0xFFFFFFFF, a[2]
        dev = self.kalloc(0x150 + ext)
        self.m.write(dev, struct.pack('<hH', 3, 0x150 + ext))
        self.m.w64(dev + 0x08, drv)
        self.m.w32(dev + 0x30, 0x80)          # DO_DEVICE_INITIALIZING
        self.m.w64(dev + 0x40, dev + 0x150 if ext else 0)
        self.m.w32(dev + 0x48, a[3] & 0xFFFFFFFF)
        self.m.write(dev + 0x4C, b'\x01')
        self.devices[dev] = self.ustr(name) if name else None
        self.m.w64(a[6], dev)
        return STATUS_SUCCESS

    def nt_IoDeleteDevice(self, a):
        if a[0] not in self.devices:
            raise BugCheck(0xC2, 'IoDeleteDevice of an unknown device', a[0])
        del self.devices[a[0]]

    def nt_IoCreateSymbolicLink(self, a):
        self.ceiling('IoCreateSymbolicLink', PASSIVE)
        if self.injected('IoCreateSymbolicLink'):
            return 0xC0000035  # STATUS_OBJECT_NAME_COLLISION
        self.links[self.ustr(a[0])] = self.ustr(a[1])
        return STATUS_SUCCESS

    def nt_IoDeleteSymbolicLink(self, a):
        name = self.ustr(a[0])
        if name not in self.links:
            return 0xC0000034
        del self.links[name]
        return STATUS_SUCCESS

    def nt_IoAttachDeviceToDeviceStack(self, a):
        return self.pdo if a[1] == self.pdo else 0

    def nt_IoDetachDevice(self, a):
        if a[0] != self.pdo:
            raise BugCheck(0xC2, 'detaching from a device not attached to')
        self.detached = True

    def nt_IofCompleteRequest(self, a):
        self.ceiling('IofCompleteRequest', DISPATCH)
        irp = a[0]
        n = self.completed.get(irp)
        if n is None:
            raise BugCheck(0x44, 'completing an IRP the I/O manager did not send', irp)
        if n:
            raise BugCheck(0x44, 'MULTIPLE_IRP_COMPLETE_REQUESTS', irp)
        self.completed[irp] = 1

    def _lower(self, irp, forward):
        """The ACPI PDO below our FDO: completes every IRP with success (START has its
        resources already in the stack location)."""
        loc = self.m.u8(irp + 0x43)
        if loc <= 1:
            raise BugCheck(0x35, 'NO_MORE_IRP_STACK_LOCATIONS', irp)
        cur = self.m.u64(irp + 0xB8)
        if forward:  # IoCopyCurrentIrpStackLocationToNext
            self.m.write(cur - 0x48, self.m.read(cur, 0x48))
        self.m.write(irp + 0x43, bytes([loc - 1]))
        self.m.w64(irp + 0xB8, cur - 0x48)
        self.m.w32(irp + 0x30, STATUS_SUCCESS)
        self.lower_saw.append(self.m.u8(cur - 0x48 + 1))
        return STATUS_SUCCESS

    def nt_IoForwardIrpSynchronously(self, a):
        self.ceiling('IoForwardIrpSynchronously', PASSIVE)
        if a[0] != self.pdo:
            raise BugCheck(0xC2, 'forwarding to a device not below')
        self._lower(a[1], forward=True)
        # The completion routine stops completion; the IRP comes back to the caller.
        self.m.write(a[1] + 0x43, bytes([self.m.u8(a[1] + 0x43) + 1]))
        self.m.w64(a[1] + 0xB8, self.m.u64(a[1] + 0xB8) + 0x48)
        return 1

    def nt_IofCallDriver(self, a):
        if a[0] != self.pdo:
            raise BugCheck(0xC2, 'calling a device not below')
        st = self._lower(a[1], forward=False)
        self.nt_IofCompleteRequest([a[1]])
        return st

    def nt_PoCallDriver(self, a):
        return self.nt_IofCallDriver(a)

    def nt_PoStartNextPowerIrp(self, a):
        pass

    # ---- the C runtime ntoskrnl exports ------------------------------------------------------
    def nt_memcpy(self, a):
        self.m.write(a[0], self.m.read(a[1], a[2]))
        return a[0]

    def nt_memset(self, a):
        self.m.write(a[0], bytes([a[1] & 0xFF]) * a[2])
        return a[0]
