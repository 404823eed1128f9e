/* Shared by the function-trace test programs: keeps a function out of
 * line and unspecialised, so it stays one symbol of its own name. */
#ifdef __clang__
#define KEEP __attribute__((noinline))
#else
#define KEEP __attribute__((noinline, noipa))
#endif
