/* A program with a known call sequence, for the function-trace tests
 * (tests/functions.rs). Every function below is instrumented; which ones
 * run, in which order and how often is fixed by the mode in argv[1]:
 *
 *   plain   main, f0..f9 (f<i> called i+1 times), then a thread running
 *           thread_main and t0..t2 (t<i> called i+1 times), then a fork
 *           whose child calls c0 twice and c1 once and exits, then p0
 *   dump    main, f0..f9, coldstart_functions_dump(), the record renamed
 *           to mid.tsv, then g0 and g1, then exit
 *   signal  main, f0..f9, prints "ready", waits on stdin: the test sends
 *           the dump signal, then kills it (no exit dump) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coldstart_functions.h"

#include "keep.h"

static volatile int sink;

#define LEAF(name, value) KEEP void name(void) { sink += value; }
LEAF(f0, 1) LEAF(f1, 2) LEAF(f2, 3) LEAF(f3, 4) LEAF(f4, 5)
LEAF(f5, 6) LEAF(f6, 7) LEAF(f7, 8) LEAF(f8, 9) LEAF(f9, 10)
LEAF(t0, 11) LEAF(t1, 12) LEAF(t2, 13)
LEAF(c0, 14) LEAF(c1, 15)
LEAF(g0, 16) LEAF(g1, 17)
LEAF(p0, 18)

static void (*const leaves[])(void) = {f0, f1, f2, f3, f4, f5, f6, f7, f8, f9};

KEEP void run_leaves(void (*const *list)(void), int n)
{
    for (int i = 0; i < n; i++)
        for (int k = 0; k <= i; k++)
            list[i]();
}

KEEP void *thread_main(void *arg)
{
    (void)arg;
    static void (*const mine[])(void) = {t0, t1, t2};
    run_leaves(mine, 3);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "plain";
    run_leaves(leaves, 10);

    if (strcmp(mode, "dump") == 0) {
        if (coldstart_functions_dump() != 0) {
            perror("coldstart_functions_dump");
            return 2;
        }
        const char *dir = getenv("COLDSTART_FUNCTIONS_DIR");
        char from[4096], to[4096];
        snprintf(from, sizeof from, "%s/functions.%d.tsv", dir, (int)getpid());
        snprintf(to, sizeof to, "%s/mid.tsv", dir);
        if (rename(from, to) != 0) {
            perror("rename");
            return 2;
        }
        g0();
        g1();
        g1();
        return 0;
    }
    if (strcmp(mode, "signal") == 0) {
        printf("ready\n");
        fflush(stdout);
        char byte;
        while (read(0, &byte, 1) > 0) {
        }
        return 0;
    }

    pthread_t thread;
    if (pthread_create(&thread, NULL, thread_main, NULL) != 0)
        return 2;
    pthread_join(thread, NULL);
    pid_t child = fork();
    if (child == 0) {
        c0();
        c0();
        c1();
        exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    p0();
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 3;
}
