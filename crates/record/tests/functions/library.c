/* An instrumented shared library loaded by an uninstrumented program
 * (host.c), for the function-trace tests: lib_entry calls l0..l4, l<i>
 * i+1 times, and l0 calls helper, which the uninstrumented build inlines
 * away. */
#include "keep.h"

static volatile int sink;

static inline int helper(int x)
{
    return x * 3;
}

KEEP void l0(void) { sink += helper(sink); }
KEEP void l1(void) { sink += 2; }
KEEP void l2(void) { sink += 3; }
KEEP void l3(void) { sink += 4; }
KEEP void l4(void) { sink += 5; }

static void (*const calls[])(void) = {l0, l1, l2, l3, l4};

void lib_entry(void)
{
    for (int i = 0; i < 5; i++)
        for (int k = 0; k <= i; k++)
            calls[i]();
}
