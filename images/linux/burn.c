/*
 * burn: a user-mode workload whose functions hvprof must name in a Linux guest (issue 43).
 * main -> work -> leaf_a, leaf_b, leaf_c, which run the same loop body for 1, 2 and 4 times
 * as many iterations, so their shares of the leaves' user-mode time are its shares of the
 * iterations; then work -> fill -> libc's memset. It runs ROUNDS rounds of the three (a round is 7 x 2^18 iterations, about 3 ms
 * of user-mode time on this project's hosts) and prints the iterations each leaf ran:
 *
 *     hvtest: burn NAME leaf_a=N leaf_b=N leaf_c=N
 *
 * A fixed amount of user-mode work, not a time: where the host emulates guest-kernel code,
 * timer interrupts can take most of each second (and the kernel's tick-charged user time
 * overstates the little left), so a run of so many seconds has almost no user time to sample.
 * User-mode code runs natively, so ROUNDS rounds cost the same host CPU time on every host.
 *
 * Usage: burn ROUNDS NAME. images/linux/build.sh builds it three times with -O2 -g,
 * unstripped: /bin/burn static without frame pointers (as most distributions build user
 * code), /bin/burn-fp static with them, and /bin/burn-dyn a dynamic PIE without them, which
 * runs with the host's ld.so and libc.so.6, copied into the initramfs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile unsigned long sink;

#define LEAF(name)                                                                         \
    __attribute__((noinline)) void name(unsigned long n)                                   \
    {                                                                                      \
        for (unsigned long i = 0; i < n; i++)                                              \
            sink += i ^ (i >> 3);                                                          \
    }

LEAF(leaf_a)
LEAF(leaf_b)
LEAF(leaf_c)

/* Memory fill() writes with libc's memset: where the program is dynamic, libc.so.6 does that
 * part of the work. */
unsigned char fill_buf[1 << 20];

/* n / 65536 MiB through memset (4 MiB a round), about a fifth of a round's time. */
__attribute__((noinline)) void fill(unsigned long n)
{
    for (unsigned long i = 0; i < n / 65536; i++)
        memset(fill_buf, (int)i, sizeof fill_buf);
    sink += fill_buf[n % sizeof fill_buf];
}

/* One round: each leaf once, its iterations added to its counter, then the fill. */
__attribute__((noinline)) void work(unsigned long n, unsigned long long done[3])
{
    leaf_a(n);
    leaf_b(2 * n);
    leaf_c(4 * n);
    fill(n);
    done[0] += n;
    done[1] += 2 * n;
    done[2] += 4 * n;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: burn ROUNDS NAME\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    unsigned long long done[3] = {0, 0, 0};
    for (long i = 0; i < rounds; i++)
        work(1UL << 18, done);
    printf("hvtest: burn %s leaf_a=%llu leaf_b=%llu leaf_c=%llu\n", argv[2], done[0], done[1],
           done[2]);
    return 0;
}
