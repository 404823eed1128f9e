/* The one call a program can make to coldstart's function-tracing runtime
 * (coldstart_functions.c). Programs built with -finstrument-functions (gcc,
 * clang) or -finstrument-function-entry-bare (clang) record their first
 * calls on their own; this header is only needed to dump them at a moment
 * the program chooses, such as "startup done". docs/functions-format.md
 * describes the environment variables and the file written. */
#ifndef COLDSTART_FUNCTIONS_H
#define COLDSTART_FUNCTIONS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Writes this process's record now, to
 * $COLDSTART_FUNCTIONS_DIR/functions.<pid>.tsv (replacing an earlier dump
 * of the same process; counts are cumulative). Returns 0 when written, -1
 * with errno set otherwise: EINVAL when COLDSTART_FUNCTIONS_DIR is unset,
 * EBUSY when another dump of this process is under way, else the error of
 * the failing system call. Async-signal-safe. */
int coldstart_functions_dump(void) __attribute__((no_instrument_function));

#ifdef __cplusplus
}
#endif

#endif
