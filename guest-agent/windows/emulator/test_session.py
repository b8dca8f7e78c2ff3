"""The CLI's own session code (hvprof_agent::session, via the emulated_session example) against
hvprof.sys in the emulated kernel: its token and counters belong to an emulated process."""
import os
import subprocess
import unittest

from ntemu.io import Driver
from test_driver import SYS, HELPER, KERNEL

SESSION = os.environ.get('EMULATED_SESSION', 'target/debug/examples/emulated_session')


def serve(d, p, fo, args):
    """Runs the session as process p (an elevated caller: privilege held, not enabled)."""
    s = subprocess.Popen([SESSION] + args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    try:
        while True:
            line = s.stdout.readline().split()
            if not line or line[0] in ('counts', 'error'):
                return ' '.join(line)
            cmd = line[0]
            if cmd == 'ioctl':
                data = b'' if line[2] == '-' else bytes.fromhex(line[2])
                st, out = d.ioctl(p, fo, int(line[1], 16), data, int(line[3]))
                answer = 'ok ' + (out.hex() or '-') if st == 0 else 'err %#x' % st
            elif cmd == 'privilege':
                answer = 'ok %d' % p.enable(11)
            elif cmd == 'alloc':
                answer = 'ok %#x' % p.virtual_alloc(int(line[1]))
            elif cmd == 'write':
                p.write(int(line[1], 16), int(line[2]).to_bytes(4, 'little'))
                answer = 'ok'
            elif cmd == 'read':
                answer = 'ok %d' % int.from_bytes(p.read(int(line[1], 16), 4), 'little')
            elif cmd == 'wait':
                for rip in (KERNEL + 0x40, KERNEL + 0x40, KERNEL + 0xFFF0):
                    d.k.vmm.ask('tick %#x %#x' % (rip, p.cr3))
                answer = 'ok'
            else:
                raise AssertionError('unknown request %r' % line)
            s.stdin.write(answer + '\n')
            s.stdin.flush()
    finally:
        s.stdin.close()
        s.wait(timeout=10)
        s.stdout.close()


class Session(unittest.TestCase):
    def setUp(self):
        self.d = Driver(SYS, HELPER)
        self.addCleanup(self.d.close)
        self.assertEqual(self.d.driver_entry(), 0)
        self.p = self.d.process(privileged_held=True)
        st, self.fo = self.d.open(self.p)

    def tearDown(self):
        self.d.exit_process(self.p)
        self.d.unload()

    def test_an_elevated_agent_enables_its_privilege_before_profiling_the_kernel(self):
        # Bug: the agent never enabled SeSystemProfilePrivilege; held but disabled it does not
        # count, and a kernel range was refused (STATUS_ACCESS_DENIED).
        out = serve(self.d, self.p, self.fo, ['kernel'])
        self.assertEqual(out, 'counts 16:2 16380:1')

    def test_large_counters_are_touched_before_create(self):
        # Bug: vec![0u32; n] is untouched demand-zero memory on Windows; the VMM's CREATE check
        # wants every page mapped writable now (STATUS_ACCESS_VIOLATION). 64 KiB of code at
        # 4-byte buckets: 16 pages of counters, in the agent's own process (no privilege needed).
        out = serve(self.d, self.p, self.fo,
                    ['process', str(self.p.pid), '0x400000', '0x10000'])
        self.assertEqual(out, 'counts')


if __name__ == '__main__':
    unittest.main()
