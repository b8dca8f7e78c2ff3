"""The I/O manager's side: DriverEntry, IRPs to the control device and the PnP device, process
creation and exit, unload; after every call into the driver, the invariants are checked."""
import struct

from .kernel import Kernel, PASSIVE, STATUS_PENDING
from .machine import BugCheck, IMAGE_VA
from .process import Process, SE_SYSTEM_PROFILE_PRIVILEGE

IRP_MJ_CREATE, IRP_MJ_CLOSE, IRP_MJ_DEVICE_CONTROL = 0x00, 0x02, 0x0E
IRP_MJ_CLEANUP, IRP_MJ_POWER, IRP_MJ_PNP = 0x12, 0x16, 0x1B
IRP_MN_START_DEVICE, IRP_MN_REMOVE_DEVICE = 0x00, 0x02


class Driver:
    def __init__(self, sys_path, helper):
        self.k = Kernel(helper)
        self.m = self.k.m
        self.m.load(sys_path, self.k.resolve)
        self.m.hook_instructions(self._cr3, self._cpuid, self._in, self._out)
        self.k.pdo = self.k.kalloc(0x150)
        self.k.lower_saw = []
        self.k.detached = False
        self.obj = self.k.kalloc(0x150)
        ext = self.k.kalloc(0x40)
        self.m.w64(self.obj + 0x30, ext)
        self.m.w64(ext, self.obj)
        self.files = {}
        self.next_pid = 0x100

    # ---- the CPU's view ------------------------------------------------------------------
    def _proc(self):
        return self.k.attached or self.k.current

    def _cr3(self):
        return self._proc().cr3

    def _cpuid(self, leaf):
        return (0, 0, 0, 0)  # no hypervisor leaves: the driver falls back to the default port

    def _in(self, port, size):
        off = port - 0x6A0
        if size != 4 or off not in (0, 4):
            return 0xFFFFFFFF
        return int(self.k.vmm.ask('in %d' % off), 16)

    def _out(self, port, size, value):
        off = port - 0x6A0
        if size != 4 or off not in (0, 4):
            return
        answer = self.k.vmm.ask('out %d %#x %#x' % (off, value, self._cr3()))
        if answer.startswith('ring'):
            if self.k.irql < 2:
                raise BugCheck(0xDEAD, 'doorbell rung below DISPATCH_LEVEL (the thread may '
                                       'migrate between the two port writes)')
            self.k.rings.append(int(answer.split()[1], 16))

    # ---- calls into the driver -----------------------------------------------------------
    def _checked(self, what, fn, *args):
        r = self.m.call(fn, *args)
        k = self.k
        if k.irql != PASSIVE:
            raise BugCheck(0xA, '%s returned at IRQL %d' % (what, k.irql))
        if any(k.mutexes.values()) or any(k.spin.values()):
            raise BugCheck(0xC4, '%s returned holding a lock' % what)
        if k.attached is not None:
            raise BugCheck(0x5, '%s returned attached to a process' % what)
        if getattr(k, 'refs', 0):
            raise BugCheck(0x18, '%s leaked a process reference' % what)
        return r & 0xFFFFFFFF

    def major(self, index):
        return self.m.u64(self.obj + 0x70 + 8 * index)

    def driver_entry(self):
        reg = self.k.kalloc(16)
        entry = IMAGE_VA + self.m.pe.OPTIONAL_HEADER.AddressOfEntryPoint
        return self._checked('DriverEntry', entry, self.obj, reg)

    def unload(self):
        fn = self.m.u64(self.obj + 0x68)
        self.m.call(fn, self.obj)
        self.leak_check()

    def leak_check(self):
        k = self.k
        leaks = []
        if k.pool:
            leaks.append('pool %s' % {hex(v): s for v, s in k.pool.items()})
        if k.contiguous:
            leaks.append('contiguous memory %s' % list(map(hex, k.contiguous)))
        if k.mdls:
            leaks.append('MDLs %s' % list(map(hex, k.mdls)))
        if k.devices:
            leaks.append('devices %s' % list(k.devices.values()))
        if k.links:
            leaks.append('symbolic links %s' % list(k.links))
        if k.notify:
            leaks.append('the process-notify routine')
        if leaks:
            raise BugCheck(0xC4, 'DRIVER_VERIFIER: left behind at unload: ' + '; '.join(leaks))

    def control(self):
        return next(d for d, n in self.k.devices.items() if n == '\\Device\\HvProf')

    # ---- IRPs ----------------------------------------------------------------------------
    def irp(self, major, minor, device, file=0, stack=1, params=(0, 0, 0, 0), sysbuf=0):
        irp = self.k.kalloc(0xD0 + 0x48 * stack)
        self.m.write(irp, struct.pack('<hH', 6, 0xD0 + 0x48 * stack))
        self.m.write(irp + 0x40, bytes([1, 0, stack, stack]))  # UserMode, stack count, location
        self.m.w64(irp + 0x18, sysbuf)
        loc = irp + 0xD0 + 0x48 * (stack - 1)
        self.m.w64(irp + 0xB8, loc)
        self.m.write(loc, bytes([major, minor]))
        for i, p in enumerate(params):
            self.m.w64(loc + 8 + 8 * i, p)
        self.m.w64(loc + 0x28, device)
        self.m.w64(loc + 0x30, file)
        self.k.completed[irp] = 0
        return irp

    def send(self, irp, major, device):
        st = self._checked('dispatch %#x' % major, self.major(major), device, irp)
        done = self.k.completed.pop(irp)
        if st == STATUS_PENDING:
            raise BugCheck(0xC9, 'the driver pended an IRP it never completes')
        if done != 1:
            raise BugCheck(0xC9, 'IRP_MJ %#x returned without completing the IRP' % major)
        iosb = self.m.u32(irp + 0x30)
        if iosb != st:
            raise BugCheck(0xC9, 'returned %#x but completed with %#x' % (st, iosb))
        return st, self.m.u64(irp + 0x38)

    # ---- processes -----------------------------------------------------------------------
    def process(self, privileged_held=False):
        pid = self.next_pid
        self.next_pid += 4
        p = Process(self.m, self.k.frames, pid,
                    (SE_SYSTEM_PROFILE_PRIVILEGE,) if privileged_held else ())
        self.k.processes[pid] = p
        return p

    def as_process(self, p):
        self.k.current = p
        return p

    def open(self, p):
        """CreateFile(\\\\.\\HvProf) by process p: IRP_MJ_CREATE with a new file object."""
        if '\\DosDevices\\HvProf' not in self.k.links and '\\??\\HvProf' not in self.k.links:
            raise FileNotFoundError('no \\\\.\\HvProf link: %s' % self.k.links)
        self.as_process(p)
        fo = self.k.kalloc(0xD8)
        dev = self.control()
        st, _ = self.send(self.irp(IRP_MJ_CREATE, 0, dev, fo), IRP_MJ_CREATE, dev)
        if st == 0:
            self.files[fo] = p
        return st, fo

    def ioctl(self, p, fo, code, data=b'', out_len=0):
        """DeviceIoControl, METHOD_BUFFERED: a system buffer of max(in, out) bytes."""
        self.as_process(p)
        size = max(len(data), out_len)
        buf = self.k.kalloc(size) if size else 0
        if data:
            self.m.write(buf, data)
        dev = self.control()
        irp = self.irp(IRP_MJ_DEVICE_CONTROL, 0, dev, fo, params=(out_len, len(data), code, 0),
                       sysbuf=buf)
        st, info = self.send(irp, IRP_MJ_DEVICE_CONTROL, dev)
        if info > out_len:
            raise BugCheck(0xC9, 'Information %d exceeds the output buffer (%d)' % (info, out_len))
        return st, (self.m.read(buf, info) if info else b'')

    def close_handle(self, fo):
        """The last handle closes: IRP_MJ_CLEANUP then IRP_MJ_CLOSE (in the owner's context
        for cleanup; close may come from any)."""
        p = self.files.pop(fo)
        self.as_process(p)
        dev = self.control()
        self.send(self.irp(IRP_MJ_CLEANUP, 0, dev, fo), IRP_MJ_CLEANUP, dev)
        self.as_process(self.k.system)
        self.send(self.irp(IRP_MJ_CLOSE, 0, dev, fo), IRP_MJ_CLOSE, dev)

    def exit_process(self, p):
        """Process exit: handles close (cleanup/close), then the notify routine runs; then
        Windows bug-checks (0x76) if any of its pages is still locked."""
        for fo in [f for f, owner in self.files.items() if owner is p]:
            self.close_handle(fo)
        if self.k.notify:
            self.as_process(p)
            self._checked('process notify', self.k.notify, 0, p.pid, 0)
        p.exited = True
        if p.locked:
            raise BugCheck(0x76, 'PROCESS_HAS_LOCKED_PAGES', p.pid, len(p.locked))
        self.as_process(self.k.system)

    # ---- PnP -----------------------------------------------------------------------------
    def add_device(self):
        fn = self.m.u64(self.m.u64(self.obj + 0x30) + 8)
        self.as_process(self.k.system)
        st = self._checked('AddDevice', fn, self.obj, self.k.pdo)
        fdo = [d for d, n in self.k.devices.items() if n is None]
        return st, (fdo[0] if fdo else 0)

    def pnp(self, fdo, minor, resources=0):
        irp = self.irp(IRP_MJ_PNP, minor, fdo, stack=2, params=(0, resources, 0, 0))
        self.m.w32(irp + 0x30, 0xC00000BB)  # PnP IRPs start as STATUS_NOT_SUPPORTED
        return self.send(irp, IRP_MJ_PNP, fdo)

    def port_resources(self, base, length=8):
        """A translated CM_RESOURCE_LIST with one I/O port range."""
        lst = struct.pack('<I', 1) + struct.pack('<IIHHI', 15, 0, 1, 1, 1)
        lst += struct.pack('<BBHQI', 1, 1, 1, base, length)
        va = self.k.kalloc(len(lst))
        self.m.write(va, lst)
        return va

    def close(self):
        self.k.vmm.close()
