/* The report crate's test image for inlined functions (symbols/inlines.rs): built with
 *   gcc -O2 -g -nostdlib -static -fno-asynchronous-unwind-tables -o inline.elf inline.c
 * scale() is copied into outer(), and twice() into that copy, twice. */
static inline __attribute__((always_inline)) int twice(int x)
{
    return x * x - 3;
}

static inline __attribute__((always_inline)) int scale(int x)
{
    return twice(x + 1) * 3 + twice(x);
}

__attribute__((noinline)) int outer(int x)
{
    return scale(x) ^ 5;
}

void _start(void)
{
    volatile int r;
    for (;;)
        r = outer(r);
}
