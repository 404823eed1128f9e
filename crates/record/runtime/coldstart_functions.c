/* coldstart's function-tracing runtime. Link it into a program built with
 * gcc/clang -finstrument-functions or clang -finstrument-function-entry-bare
 * (or LD_PRELOAD the shared build for instrumented shared libraries), and
 * each process records which functions it called, in the order of their
 * first calls, with the time of the first call and a call count. The record
 * is written as text to $COLDSTART_FUNCTIONS_DIR/functions.<pid>.tsv at
 * exit, on a chosen signal, or when the program calls
 * coldstart_functions_dump(); docs/functions-format.md describes it.
 *
 * Design constraints, and why:
 * - The hooks run on every function entry of the program, so after a
 *   function's first call they only hash, probe and increment an atomic.
 * - They may run before libc's own setup is finished, inside malloc, inside
 *   signal handlers and on many threads, so the table is one anonymous
 *   mapping claimed slot by slot with compare-and-swap: no locks, no
 *   allocation, nothing that can re-enter.
 * - Every function here is no_instrument_function and calls only libc,
 *   which is not instrumented, so the hooks never recurse.
 * - A dump may run in a signal handler, so it uses only system calls
 *   (open, read, write, rename, mmap) and formats numbers itself.
 * - Addresses are written as file offsets within the mapped file (from
 *   /proc/self/maps at dump time), because load addresses change from run
 *   to run with ASLR while offsets in a file do not. */

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* rename() only: no stdio streams are used */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coldstart_functions.h"

#define LOCAL __attribute__((no_instrument_function))
#define PUBLIC __attribute__((no_instrument_function, visibility("default")))

/* The format written by dump(); bump it when a field changes meaning. */
#define FORMAT_VERSION 1

/* 2^19 slots of 32 bytes: 16 MiB of address space, of which only the pages
 * holding recorded functions become memory. Filled to three quarters at
 * most, that is 393,216 functions, more than the largest programs call
 * while starting. COLDSTART_FUNCTIONS_CAPACITY changes it. */
#define DEFAULT_BITS 19
#define MIN_BITS 10
#define MAX_BITS 28

struct slot {
    _Atomic uintptr_t key;   /* the address recorded; 0 while free */
    _Atomic uint64_t seq;    /* rank of the first call, from 1; 0 until set */
    _Atomic uint64_t t_ns;   /* CLOCK_MONOTONIC of the first call */
    _Atomic uint64_t calls;
};

enum { UNSET, SETTING_UP, READY, FAILED };

static _Atomic(struct slot *) table;
static _Atomic int state = UNSET;
static unsigned bits;
static uint64_t fill_limit;
static _Atomic uint64_t next_seq;
static _Atomic uint64_t used;
/* Calls that found the table full. A function that found no room cannot be
 * remembered, so each of its calls counts. */
static _Atomic uint64_t dropped;
/* Calls that came while another thread was setting the table up. */
static _Atomic uint64_t missed;
static uint64_t start_ns;

static char out_dir[PATH_MAX - 64];
static size_t out_dir_len;
static _Atomic int dumping;
static int dump_signal;
static struct sigaction previous_action;

LOCAL static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

LOCAL static void say(const char *message)
{
    /* Best effort: nothing to do if stderr is gone. */
    ssize_t ignored = write(2, message, strlen(message));
    (void)ignored;
}

LOCAL static size_t table_bytes(void)
{
    return sizeof(struct slot) << bits;
}

LOCAL static struct slot *map_table(void)
{
    /* NORESERVE: most of it is never touched. */
    void *p = mmap(NULL, table_bytes(), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : (struct slot *)p;
}

/* Parses a whole decimal number; -1 when the text is not one. */
LOCAL static long long parse_decimal(const char *text)
{
    long long value = 0;
    if (!*text)
        return -1;
    for (; *text; text++) {
        if (*text < '0' || *text > '9' || value > (LLONG_MAX - 9) / 10)
            return -1;
        value = value * 10 + (*text - '0');
    }
    return value;
}

LOCAL static int parse_signal(const char *text)
{
    static const struct {
        const char *name;
        int number;
    } names[] = {
        {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT},
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"ALRM", SIGALRM},
        {"TERM", SIGTERM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH},
    };
    if (strncmp(text, "SIG", 3) == 0)
        text += 3;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(text, names[i].name) == 0)
            return names[i].number;
    long long number = parse_decimal(text);
    if (number >= 1 && number <= SIGRTMAX && number != SIGKILL && number != SIGSTOP)
        return (int)number;
    return -1;
}

LOCAL static int dump(void);

LOCAL static void on_signal(int sig, siginfo_t *info, void *context)
{
    int saved = errno;
    (void)dump();
    errno = saved;
    /* A handler the program had before the runtime started still runs; the
     * default action does not, since the signal was chosen to ask for a
     * dump, not to stop the program. */
    if (previous_action.sa_flags & SA_SIGINFO) {
        if (previous_action.sa_sigaction)
            previous_action.sa_sigaction(sig, info, context);
    } else if (previous_action.sa_handler != SIG_DFL &&
               previous_action.sa_handler != SIG_IGN) {
        previous_action.sa_handler(sig);
    }
}

/* In a forked child: start a fresh record, so the child's file holds the
 * calls it made itself, numbered from 1 and timed from the fork. Only the
 * forking thread exists here, so nothing races the reset. */
LOCAL static void after_fork_in_child(void)
{
    struct slot *old = atomic_load(&table);
    if (!old)
        return;
    struct slot *fresh = map_table();
    if (fresh) {
        atomic_store(&table, fresh);
        munmap(old, table_bytes());
    } else {
        memset(old, 0, table_bytes());
    }
    atomic_store(&next_seq, 0);
    atomic_store(&used, 0);
    atomic_store(&dropped, 0);
    atomic_store(&missed, 0);
    atomic_store(&dumping, 0);
    start_ns = now_ns();
}

LOCAL static void read_settings(void)
{
    bits = DEFAULT_BITS;
    const char *capacity = getenv("COLDSTART_FUNCTIONS_CAPACITY");
    if (capacity && *capacity) {
        long long wanted = parse_decimal(capacity);
        if (wanted < 0) {
            say("coldstart_functions: COLDSTART_FUNCTIONS_CAPACITY is not a number; using the default\n");
        } else {
            bits = MIN_BITS;
            while (bits < MAX_BITS && (1ull << bits) < (unsigned long long)wanted)
                bits++;
        }
    }
    fill_limit = (1ull << bits) - (1ull << bits) / 4;

    const char *dir = getenv("COLDSTART_FUNCTIONS_DIR");
    if (dir && *dir) {
        size_t len = strlen(dir);
        if (len >= sizeof out_dir) {
            say("coldstart_functions: COLDSTART_FUNCTIONS_DIR is too long; nothing will be written\n");
        } else {
            memcpy(out_dir, dir, len + 1);
            out_dir_len = len;
        }
    }

    const char *name = getenv("COLDSTART_FUNCTIONS_SIGNAL");
    if (name && *name) {
        dump_signal = parse_signal(name);
        if (dump_signal < 0) {
            say("coldstart_functions: COLDSTART_FUNCTIONS_SIGNAL names no signal (try USR2); no signal dumps\n");
            dump_signal = 0;
        }
    }
}

LOCAL static void set_up(void)
{
    read_settings();
    start_ns = now_ns();
    struct slot *fresh = map_table();
    if (!fresh) {
        say("coldstart_functions: cannot map the call table; no calls are recorded\n");
        atomic_store(&state, FAILED);
        return;
    }
    pthread_atfork(NULL, NULL, after_fork_in_child);
    if (dump_signal) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_sigaction = on_signal;
        action.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&action.sa_mask);
        sigaction(dump_signal, &action, &previous_action);
    }
    atomic_store(&table, fresh);
    atomic_store(&state, READY);
}

/* The table, set up by the first caller. A call arriving on another thread
 * while that happens is counted as missed rather than waited for: waiting
 * could deadlock when set-up itself (pthread_atfork may call malloc) enters
 * an instrumented function. */
LOCAL static struct slot *ready_table(void)
{
    struct slot *t = atomic_load_explicit(&table, memory_order_acquire);
    if (__builtin_expect(t != NULL, 1))
        return t;
    int expected = UNSET;
    if (atomic_compare_exchange_strong(&state, &expected, SETTING_UP))
        set_up();
    return atomic_load_explicit(&table, memory_order_acquire);
}

LOCAL static inline uint64_t slot_of(uintptr_t address)
{
    /* Slots follow addresses, 8 bytes of code a slot, so functions that sit
     * together share table pages: a program touches few pages of the table
     * instead of one page fault per first call (examples/function_hook_cost
     * measured 700 ns a first call with hashed slots, 190 with these). Each
     * 4 MiB block of code starts at a hashed place, so modules loaded at
     * aligned addresses do not all crowd the same slots. */
    uint64_t block = (uint64_t)address >> 22;
    uint64_t home = ((uint64_t)address >> 3) + ((block * 0x9e3779b97f4a7c15ull) >> 40);
    return home & ((1ull << bits) - 1);
}

LOCAL static inline void record(uintptr_t address)
{
    struct slot *t = ready_table();
    if (__builtin_expect(t == NULL, 0)) {
        if (atomic_load_explicit(&state, memory_order_relaxed) == SETTING_UP)
            atomic_fetch_add_explicit(&missed, 1, memory_order_relaxed);
        return;
    }
    uint64_t mask = (1ull << bits) - 1;
    uint64_t i = slot_of(address);
    for (uint64_t probes = 0; probes <= mask; probes++, i = (i + 1) & mask) {
        struct slot *s = &t[i];
        uintptr_t key = atomic_load_explicit(&s->key, memory_order_acquire);
        if (key == address) {
            atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
            return;
        }
        if (key != 0)
            continue;
        /* A free slot: the address is not in the table. Reserve room first
         * so the table never fills past its limit, where probes grow long. */
        if (atomic_fetch_add_explicit(&used, 1, memory_order_relaxed) >= fill_limit) {
            atomic_fetch_sub_explicit(&used, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
            return;
        }
        uintptr_t expected = 0;
        if (atomic_compare_exchange_strong_explicit(&s->key, &expected, address,
                                                    memory_order_acq_rel,
                                                    memory_order_acquire)) {
            uint64_t seq = atomic_fetch_add_explicit(&next_seq, 1, memory_order_relaxed) + 1;
            atomic_store_explicit(&s->t_ns, now_ns(), memory_order_relaxed);
            atomic_store_explicit(&s->calls, 1, memory_order_relaxed);
            /* Published last: a dump skips slots whose seq is still 0. */
            atomic_store_explicit(&s->seq, seq, memory_order_release);
            return;
        }
        atomic_fetch_sub_explicit(&used, 1, memory_order_relaxed);
        if (expected == address) {
            /* Another thread's first call of the same function won. */
            atomic_fetch_add_explicit(&s->calls, 1, memory_order_relaxed);
            return;
        }
    }
    atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
}

PUBLIC void __cyg_profile_func_enter(void *function, void *call_site)
{
    (void)call_site;
    record((uintptr_t)function);
}

PUBLIC void __cyg_profile_func_exit(void *function, void *call_site)
{
    (void)function;
    (void)call_site;
}

/* clang -finstrument-function-entry-bare passes nothing; the return address
 * lies in the instrumented function's prologue, which the reader maps to
 * the symbol containing it. */
PUBLIC void __cyg_profile_func_enter_bare(void)
{
    record((uintptr_t)__builtin_return_address(0));
}

/* ---- Dumping: system calls only, from here on. ---- */

/* Output buffered in a static block: the dump lock makes it exclusive, and
 * a signal handler's stack may be too small for it. */
static char out[1 << 16];
static size_t out_len;
static int out_fd = -1;
static int out_failed;

LOCAL static void flush_out(void)
{
    size_t done = 0;
    while (done < out_len && !out_failed) {
        ssize_t n = write(out_fd, out + done, out_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            out_failed = errno ? errno : EIO;
            break;
        }
        done += (size_t)n;
    }
    out_len = 0;
}

LOCAL static void put(const char *text, size_t len)
{
    while (len > 0) {
        if (out_len == sizeof out)
            flush_out();
        size_t room = sizeof out - out_len;
        size_t n = len < room ? len : room;
        memcpy(out + out_len, text, n);
        out_len += n;
        text += n;
        len -= n;
    }
}

LOCAL static void put_text(const char *text)
{
    put(text, strlen(text));
}

LOCAL static void put_u64(uint64_t value)
{
    char digits[20];
    size_t n = 0;
    do {
        digits[sizeof digits - ++n] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    put(digits + sizeof digits - n, n);
}

LOCAL static void put_hex(uint64_t value)
{
    char digits[16];
    size_t n = 0;
    do {
        digits[sizeof digits - ++n] = "0123456789abcdef"[value & 15];
        value >>= 4;
    } while (value);
    put("0x", 2);
    put(digits + sizeof digits - n, n);
}

/* Module paths are the last field of a maps line and may hold tabs or
 * backslashes; escape them so the dump stays one record per line. */
LOCAL static void put_path(const char *path, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (path[i] == '\t')
            put("\\t", 2);
        else if (path[i] == '\\')
            put("\\\\", 2);
        else if (path[i] == '\n')
            put("\\n", 2);
        else
            put(path + i, 1);
    }
}

/* One line of /proc/self/maps. */
struct mapping {
    uint64_t start, end, offset, dev, ino;
    const char *path;
    size_t path_len;
};

LOCAL static void unmap_block(void *block, size_t size)
{
    if (block && block != MAP_FAILED)
        munmap(block, size);
}

/* Reads /proc/self/maps whole into a mapping of its own; returns its size
 * or -1. The file has no size to ask for, so the block grows as it fills. */
LOCAL static ssize_t read_maps(char **text, size_t *capacity)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t size = 1 << 16, len = 0;
    char *buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (;;) {
        if (buf == MAP_FAILED) {
            close(fd);
            return -1;
        }
        if (len == size) {
            char *bigger = mremap(buf, size, size * 2, MREMAP_MAYMOVE);
            if (bigger == MAP_FAILED) {
                int saved = errno;
                munmap(buf, size);
                close(fd);
                errno = saved;
                return -1;
            }
            buf = bigger;
            size *= 2;
        }
        ssize_t n = read(fd, buf + len, size - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int saved = errno;
            munmap(buf, size);
            close(fd);
            errno = saved;
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    *text = buf;
    *capacity = size;
    return (ssize_t)len;
}

LOCAL static uint64_t parse_hex(const char **p, const char *end)
{
    uint64_t value = 0;
    for (; *p < end; (*p)++) {
        char c = **p;
        if (c >= '0' && c <= '9')
            value = value * 16 + (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            value = value * 16 + (uint64_t)(c - 'a' + 10);
        else
            break;
    }
    return value;
}

LOCAL static uint64_t parse_dec(const char **p, const char *end)
{
    uint64_t value = 0;
    for (; *p < end && **p >= '0' && **p <= '9'; (*p)++)
        value = value * 10 + (uint64_t)(**p - '0');
    return value;
}

LOCAL static void skip_spaces(const char **p, const char *end)
{
    while (*p < end && **p == ' ')
        (*p)++;
}

LOCAL static void skip_field(const char **p, const char *end)
{
    while (*p < end && **p != ' ' && **p != '\n')
        (*p)++;
}

/* st_dev as glibc's makedev encodes it, so the number matches stat(2). */
LOCAL static uint64_t device_number(uint64_t major, uint64_t minor)
{
    return ((major & 0xfffff000u) << 32) | ((major & 0xfffu) << 8) |
           ((minor & 0xffffff00u) << 12) | (minor & 0xffu);
}

/* "start-end perms offset major:minor inode   path" */
LOCAL static size_t parse_maps(const char *text, size_t len, struct mapping *maps, size_t max)
{
    const char *p = text, *end = text + len;
    size_t n = 0;
    while (p < end && n < max) {
        const char *line_end = memchr(p, '\n', (size_t)(end - p));
        if (!line_end)
            line_end = end;
        struct mapping *m = &maps[n];
        m->start = parse_hex(&p, line_end);
        p++; /* '-' */
        m->end = parse_hex(&p, line_end);
        skip_spaces(&p, line_end);
        skip_field(&p, line_end); /* perms */
        skip_spaces(&p, line_end);
        m->offset = parse_hex(&p, line_end);
        skip_spaces(&p, line_end);
        uint64_t major = parse_hex(&p, line_end);
        p++; /* ':' */
        uint64_t minor = parse_hex(&p, line_end);
        m->dev = device_number(major, minor);
        skip_spaces(&p, line_end);
        m->ino = parse_dec(&p, line_end);
        skip_spaces(&p, line_end);
        m->path = p < line_end ? p : NULL;
        m->path_len = p < line_end ? (size_t)(line_end - p) : 0;
        if (m->end > m->start)
            n++;
        p = line_end + 1;
    }
    return n;
}

/* maps lists mappings by address; binary search for the one holding it. */
LOCAL static const struct mapping *mapping_of(const struct mapping *maps, size_t n, uint64_t address)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (address < maps[mid].start)
            hi = mid;
        else if (address >= maps[mid].end)
            lo = mid + 1;
        else
            return &maps[mid];
    }
    return NULL;
}

LOCAL static void put_function(const struct mapping *m, uintptr_t address, uint64_t seq,
                                uint64_t t_ns, uint64_t calls)
{
    if (m && m->ino != 0) {
        put_path(m->path, m->path_len);
        put("\t", 1);
        put_u64(m->dev);
        put("\t", 1);
        put_u64(m->ino);
        put("\t", 1);
        put_hex(address - m->start + m->offset);
    } else {
        /* Not in a file: anonymous memory (JIT code), or a module unloaded
         * since. The address itself is all there is. */
        if (!m)
            put_text("[unmapped]");
        else if (m->path_len)
            put_path(m->path, m->path_len);
        else
            put_text("[anonymous]");
        put("\t0\t0\t", 5);
        put_hex(address);
    }
    put("\t", 1);
    put_u64(seq);
    put("\t", 1);
    put_u64(t_ns);
    put("\t", 1);
    put_u64(calls);
    put("\n", 1);
}

LOCAL static size_t build_name(char *name, pid_t pid, int temporary)
{
    size_t n = out_dir_len;
    memcpy(name, out_dir, n);
    memcpy(name + n, "/functions.", 11);
    n += 11;
    char digits[20];
    size_t d = 0;
    uint64_t value = (uint64_t)pid;
    do {
        digits[sizeof digits - ++d] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    memcpy(name + n, digits + sizeof digits - d, d);
    n += d;
    memcpy(name + n, temporary ? ".tsv.tmp" : ".tsv", temporary ? 9 : 5);
    return n;
}

LOCAL static int write_record(const struct mapping *maps, size_t nmaps)
{
    struct slot *t = atomic_load_explicit(&table, memory_order_acquire);
    pid_t pid = getpid();
    char temporary[PATH_MAX], final[PATH_MAX];
    build_name(temporary, pid, 1);
    build_name(final, pid, 0);
    out_fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0)
        return -1;
    out_len = 0;
    out_failed = 0;

    put_text("coldstart-functions ");
    put_u64(FORMAT_VERSION);
    put_text(" pid=");
    put_u64((uint64_t)pid);
    put_text(" ppid=");
    put_u64((uint64_t)getppid());
    put_text(" start_ns=");
    put_u64(start_ns);
    put_text(" capacity=");
    put_u64(fill_limit);
    put_text(" dropped=");
    put_u64(atomic_load(&dropped));
    put_text(" missed=");
    put_u64(atomic_load(&missed));
    put_text("\n");

    uint64_t written = 0;
    for (uint64_t i = 0; i < (1ull << bits); i++) {
        uintptr_t key = atomic_load_explicit(&t[i].key, memory_order_acquire);
        if (!key)
            continue;
        uint64_t seq = atomic_load_explicit(&t[i].seq, memory_order_acquire);
        if (!seq)
            continue; /* its first call is being recorded right now */
        put_function(mapping_of(maps, nmaps, key), key, seq,
                     atomic_load_explicit(&t[i].t_ns, memory_order_relaxed),
                     atomic_load_explicit(&t[i].calls, memory_order_relaxed));
        written++;
    }
    /* The count at the end tells a whole file from one cut short. */
    put_text("end\t");
    put_u64(written);
    put_text("\n");
    flush_out();
    int failed = out_failed;
    if (close(out_fd) != 0 && !failed)
        failed = errno;
    out_fd = -1;
    /* Renamed into place only when whole, so a reader never sees a half
     * written record, and a later dump replaces an earlier one at once. */
    if (!failed && rename(temporary, final) != 0)
        failed = errno;
    if (failed) {
        unlink(temporary);
        errno = failed;
        return -1;
    }
    return 0;
}

LOCAL static int dump(void)
{
    if (atomic_load(&state) != READY || !atomic_load(&table)) {
        errno = EAGAIN;
        return -1;
    }
    if (!out_dir_len) {
        errno = EINVAL;
        return -1;
    }
    if (atomic_exchange(&dumping, 1)) {
        errno = EBUSY;
        return -1;
    }
    int result = -1;
    char *text = NULL;
    size_t text_size = 0, maps_size = 0;
    struct mapping *maps = MAP_FAILED;
    ssize_t len = read_maps(&text, &text_size);
    if (len >= 0) {
        size_t lines = 1;
        for (ssize_t i = 0; i < len; i++)
            lines += text[i] == '\n';
        maps_size = lines * sizeof(struct mapping);
        maps = mmap(NULL, maps_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (maps != MAP_FAILED)
            result = write_record(maps, parse_maps(text, (size_t)len, maps, lines));
    }
    int saved = errno;
    unmap_block(maps, maps_size);
    unmap_block(text, text_size);
    atomic_store(&dumping, 0);
    errno = saved;
    return result;
}

PUBLIC int coldstart_functions_dump(void)
{
    return dump();
}

/* Set up before main, so start_ns is the process's start and the signal
 * handler is in place early; instrumented code that runs even earlier (an
 * earlier library's constructors) sets it up on its first call instead. */
__attribute__((constructor(101), no_instrument_function)) static void at_start(void)
{
    (void)ready_table();
}

__attribute__((destructor(101), no_instrument_function)) static void at_exit(void)
{
    if (out_dir_len)
        (void)dump();
}
