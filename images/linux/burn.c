/*
 * burn: a user-mode workload whose functions hvprof must name in a Linux guest (issue 43).
 * main -> work -> leaf_a, leaf_b, leaf_c, which run the same loop body for 1, 2 and 4 times
 * as many iterations, so their shares of the program's user-mode time are its shares of the
 * iterations. After SECONDS seconds it prints the iterations each leaf ran:
 *
 *     hvtest: burn NAME leaf_a=N leaf_b=N leaf_c=N
 *
 * (Not the time-stamp counter around each call: where the host emulates guest-kernel code,
 * the timer interrupts taken inside a leaf are most of its wall-clock time, and they land in
 * the leaves by chance.)
 *
 * Usage: burn SECONDS NAME. images/linux/build.sh builds it twice, static and unstripped
 * with -O2 -g: /bin/burn without frame pointers (as most distributions build user code),
 * /bin/burn-fp with them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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

/* One round: each leaf once, its iterations added to its counter. */
__attribute__((noinline)) void work(unsigned long n, unsigned long long done[3])
{
    leaf_a(n);
    leaf_b(2 * n);
    leaf_c(4 * n);
    done[0] += n;
    done[1] += 2 * n;
    done[2] += 4 * n;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: burn SECONDS NAME\n");
        return 2;
    }
    double seconds = atof(argv[1]);
    unsigned long long done[3] = {0, 0, 0};
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        work(1UL << 18, done);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((double)(now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
    printf("hvtest: burn %s leaf_a=%llu leaf_b=%llu leaf_c=%llu\n", argv[2], done[0], done[1],
           done[2]);
    return 0;
}
