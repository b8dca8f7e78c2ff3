"""hvprof.sys under the emulated NT kernel, its doorbell answered by the VMM's real Rust code.
Run by run.sh: HVPROF_SYS and EMU_DOORBELL name the driver and the helper."""
import os
import struct
import unittest

from ntemu.io import Driver, IRP_MN_START_DEVICE, IRP_MN_REMOVE_DEVICE
from ntemu.machine import BugCheck

SYS = os.environ.get('HVPROF_SYS', 'target/windows/hvprof.sys')
HELPER = os.environ.get('EMU_DOORBELL', 'target/debug/examples/emu_doorbell')
KERNEL = 0xFFFFF800_00000000
SUCCESS, ACCESS_VIOLATION, ACCESS_DENIED = 0, 0xC0000005, 0xC0000022
INSUFFICIENT_RESOURCES, PRIVILEGE_NOT_HELD = 0xC000009A, 0xC0000061


def ctl(function, access):
    return (0x8A50 << 16) | (access << 14) | (function << 2)


QUERY_INFO, CREATE, CREATE_EX = ctl(0x800, 0), ctl(0x801, 3), ctl(0x802, 3)
START, STOP, CLOSE = ctl(0x803, 3), ctl(0x804, 3), ctl(0x805, 3)
SET_INTERVAL, QUERY_INTERVAL, READ_STATS = ctl(0x806, 3), ctl(0x807, 0), ctl(0x808, 0)


def create_in(buffer, size=0x10000, base=KERNEL, buffer_size=0x3000, shift=5, pid=0):
    return struct.pack('<QQQQIIIIHHIQ', pid, base, size, buffer, buffer_size, shift, 0, 0, 0,
                       0, 0, 1)


def handle_in(h):
    return struct.pack('<II', h, 0)


class Base(unittest.TestCase):
    def setUp(self):
        self.d = Driver(SYS, HELPER)
        self.addCleanup(self.d.close)

    def loaded(self):
        self.assertEqual(self.d.driver_entry(), SUCCESS)

    def caller(self, enabled=True):
        """An elevated caller (holds SeSystemProfilePrivilege), with it enabled or not."""
        p = self.d.process(privileged_held=True)
        if enabled:
            p.enable(11)
        st, fo = self.d.open(p)
        self.assertEqual(st, SUCCESS)
        return p, fo

    def counters(self, p, size=0x3000, touch=True):
        va = p.virtual_alloc(size)
        if touch:
            for page in range(0, size, 4096):
                p.write(va + page, b'\0')
        return va

    def create(self, p, fo, buf, **kw):
        st, out = self.d.ioctl(p, fo, CREATE, create_in(buf, **kw), 16)
        return st, (struct.unpack('<I', out[:4])[0] if st == SUCCESS else None)


class Loading(Base):
    def test_driver_entry_creates_the_device_and_unload_frees_everything(self):
        self.loaded()
        self.assertEqual(self.d.k.links, {'\\DosDevices\\HvProf': '\\Device\\HvProf'})
        self.assertTrue(self.d.k.notify)
        self.d.unload()

    def test_driver_entry_undoes_its_work_when_any_step_fails(self):
        for routine in ('MmAllocateContiguousMemory', 'IoCreateDevice', 'IoCreateSymbolicLink',
                        'PsSetCreateProcessNotifyRoutine'):
            with self.subTest(routine=routine):
                d = Driver(SYS, HELPER)
                try:
                    d.k.fail[routine] = 0
                    self.assertNotEqual(d.driver_entry(), SUCCESS)
                    d.leak_check()  # the I/O manager does not call Unload after a failure
                finally:
                    d.close()

    def test_a_failed_context_allocation_fails_the_open_cleanly(self):
        self.loaded()
        p = self.d.process()
        self.d.k.fail['ExAllocatePoolWithTag'] = 0
        st, _ = self.d.open(p)
        self.assertEqual(st, INSUFFICIENT_RESOURCES)
        self.d.unload()

    def test_pnp_start_adopts_the_acpi_port_and_remove_detaches(self):
        self.loaded()
        st, fdo = self.d.add_device()
        self.assertEqual(st, SUCCESS)
        st, _ = self.d.pnp(fdo, IRP_MN_START_DEVICE, self.d.port_resources(0x6A0))
        self.assertEqual(st, SUCCESS)
        p, fo = self.caller()
        st, out = self.d.ioctl(p, fo, QUERY_INFO, b'', 48)
        self.assertEqual(st, SUCCESS)
        port, source = struct.unpack('<HH', out[:4])
        self.assertEqual((port, source), (0x6A0, 1))  # found by ACPI HVPR0001
        st, _ = self.d.pnp(fdo, IRP_MN_REMOVE_DEVICE)
        self.assertEqual(st, SUCCESS)
        self.assertTrue(self.d.k.detached)
        st, out = self.d.ioctl(p, fo, QUERY_INFO, b'', 48)
        self.assertEqual(struct.unpack('<HH', out[:4]), (0x6A0, 3))  # back to the default port
        self.d.exit_process(p)
        self.d.unload()


class Calls(Base):
    def setUp(self):
        super().setUp()
        self.loaded()

    def test_every_ioctl_reaches_the_vmm_and_counts_arrive_in_the_locked_buffer(self):
        p, fo = self.caller()
        st, out = self.d.ioctl(p, fo, SET_INTERVAL, struct.pack('<II', 0, 5000), 8)
        self.assertEqual((st, struct.unpack('<I', out[:4])[0]), (SUCCESS, 5000))
        st, out = self.d.ioctl(p, fo, QUERY_INTERVAL, struct.pack('<II', 0, 0), 8)
        self.assertEqual((st, struct.unpack('<I', out[:4])[0]), (SUCCESS, 5000))
        buf = self.counters(p)
        st, h = self.create(p, fo, buf)
        self.assertEqual(st, SUCCESS)
        st, out = self.d.ioctl(p, fo, START, handle_in(h), 8)
        self.assertEqual((st, struct.unpack('<I', out[:4])[0]), (SUCCESS, 3))
        frames = [p.translate(buf + i * 4096) for i in range(3)]
        self.assertNotEqual(frames, list(range(frames[0], frames[0] + 3)),
                            'the test wants a non-contiguous buffer')
        # Samples at base + 0x20 (bucket 1) and base + 0x8000 (bucket 0x400, second page).
        for rip in (KERNEL + 0x20, KERNEL + 0x20, KERNEL + 0x8000):
            self.d.k.vmm.ask('tick %#x %#x' % (rip, p.cr3))
        st, _ = self.d.ioctl(p, fo, STOP, handle_in(h), 0)
        self.assertEqual(st, SUCCESS)
        self.assertEqual(p.locked, {})
        self.assertEqual(struct.unpack('<I', p.read(buf + 4, 4))[0], 2)
        self.assertEqual(struct.unpack('<I', p.read(buf + 0x1000, 4))[0], 1)
        st, out = self.d.ioctl(p, fo, READ_STATS, b'', 48)
        self.assertEqual(st, SUCCESS)
        self.assertEqual(struct.unpack('<Q', out[:8])[0], 3)
        st, _ = self.d.ioctl(p, fo, CLOSE, handle_in(h), 0)
        self.assertEqual(st, SUCCESS)
        self.d.exit_process(p)
        self.d.unload()

    def test_a_held_but_disabled_privilege_does_not_count(self):
        p, fo = self.caller(enabled=False)
        st, _ = self.create(p, fo, self.counters(p))
        self.assertEqual(st, ACCESS_DENIED)  # a kernel range needs the privilege
        st, _ = self.d.ioctl(p, fo, SET_INTERVAL, struct.pack('<II', 0, 5000), 8)
        self.assertEqual(st, PRIVILEGE_NOT_HELD)
        q, fq = self.caller(enabled=True)
        st, _ = self.create(q, fq, self.counters(q))
        self.assertEqual(st, SUCCESS)
        self.d.exit_process(p)
        self.d.exit_process(q)
        self.d.unload()

    def test_untouched_counters_are_refused_at_create(self):
        p, fo = self.caller()
        st, _ = self.create(p, fo, self.counters(p, touch=False))
        self.assertEqual(st, ACCESS_VIOLATION)
        self.d.exit_process(p)
        self.d.unload()

    def test_per_process_objects_and_a_second_process_cannot_touch_them(self):
        p, fo = self.caller()
        q, fq = self.caller(enabled=False)
        buf = self.counters(p)
        st, h = self.create(p, fo, buf, base=0x10000, pid=p.pid)
        self.assertEqual(st, SUCCESS)
        st, _ = self.d.ioctl(p, fo, START, handle_in(h), 8)
        self.assertEqual(st, SUCCESS)
        st, _ = self.d.ioctl(q, fq, STOP, handle_in(h), 0)
        self.assertNotEqual(st, SUCCESS)
        st, _ = self.create(q, fq, self.counters(q), base=0x10000, pid=p.pid)
        self.assertEqual(st, ACCESS_DENIED)  # another process's space without the privilege
        self.d.k.vmm.ask('tick %#x %#x' % (0x10040, p.cr3))
        self.d.k.vmm.ask('tick %#x %#x' % (0x10040, q.cr3))  # other address space: not counted
        self.d.ioctl(p, fo, STOP, handle_in(h), 0)
        self.assertEqual(struct.unpack('<I', p.read(buf + 8, 4))[0], 1)
        self.d.exit_process(q)
        self.d.exit_process(p)
        self.d.unload()

    def test_a_buffer_that_vanished_before_start_is_caught_by_the_seh_scope(self):
        p, fo = self.caller()
        buf = self.counters(p)
        st, h = self.create(p, fo, buf)
        self.assertEqual(st, SUCCESS)
        p.decommit(buf + 0x1000, 0x1000)
        st, _ = self.d.ioctl(p, fo, START, handle_in(h), 8)
        self.assertEqual(st, ACCESS_VIOLATION)
        self.assertEqual(self.d.k.mdls, {})
        self.d.exit_process(p)
        self.d.unload()

    def test_process_exit_with_started_objects_unlocks_and_closes_them(self):
        p, fo = self.caller()
        for _ in range(2):
            st, h = self.create(p, fo, self.counters(p))
            self.assertEqual(self.d.ioctl(p, fo, START, handle_in(h), 8)[0], SUCCESS)
        self.assertTrue(p.locked)
        self.d.exit_process(p)  # bug check 0x76 if any page stayed locked
        st, out = self.d.ioctl(*self.caller(), READ_STATS, b'', 48)
        self.assertEqual(struct.unpack('<II', out[40:48]), (0, 0))  # no object open or started


class MemoryMap(Base):
    """Guest RAM is what the memory map says: 0xA0000-0xFFFFF is not RAM though slot-backed."""

    def ring(self, pa, block):
        self.d.m.phys_write(pa, block)
        self.d.k.vmm.ask('out 4 0 0')
        return int(self.d.k.vmm.ask('out 0 %#x 0' % pa).split()[1], 16)

    def test_a_request_block_outside_ram_is_refused_unread(self):
        query_info = struct.pack('<IIII', 1, 1, 16 + 48, 0) + bytes(48)
        self.assertEqual(self.ring(0x3000, query_info), SUCCESS)
        for pa in (0xA0000, 0xC0000, 0xFFFF0, 0x9FFF8):
            with self.subTest(pa=hex(pa)):
                self.d.m.phys_write(pa, struct.pack('<IIII', 1, 1, 64, 0x1234))
                self.assertEqual(self.ring(pa, query_info), ACCESS_VIOLATION)
                self.assertEqual(self.d.m.phys_read(pa + 12, 4), struct.pack('<I', 0))

    def test_frames_outside_ram_are_refused_at_start(self):
        self.loaded()
        p, fo = self.caller()
        buf = self.counters(p)
        st, h = self.create(p, fo, buf)
        real = self.d.k.nt_MmProbeAndLockPages

        def rogue(a):  # a page list naming the BIOS area, as a faulty kernel might
            real(a)
            self.d.m.w64(a[0] + 0x30 + 8, 0xF0)
        self.d.k.routines['MmProbeAndLockPages'] = rogue
        stub = [va for va, (n, _) in self.d.m.routines.items() if n == 'MmProbeAndLockPages'][0]
        self.d.m.routines[stub] = ('MmProbeAndLockPages', lambda m, a: rogue(a))
        st, _ = self.d.ioctl(p, fo, START, handle_in(h), 8)
        self.assertEqual(st, INSUFFICIENT_RESOURCES)
        self.d.exit_process(p)
        self.d.unload()


if __name__ == '__main__':
    unittest.main()
