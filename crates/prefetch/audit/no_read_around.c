/* coldstart's LD_AUDIT module for `coldstart run --no-read-around`.
 *
 * When the dynamic loader has mapped a shared object (la_objopen runs after
 * the mapping and before relocation, at start and at every dlopen), this
 * module marks the object's non-executable PT_LOAD segments MADV_RANDOM if the
 * file is one of the plan's: a fault there then reads its own page instead of
 * a read_ahead_kb window around it (mm/filemap.c do_sync_mmap_readahead). The
 * plan's prefetcher brings in the rest. Executable segments are left alone:
 * since Linux 6.16 the kernel reads ahead on exec faults whatever the advice.
 *
 * Files the program maps itself (archives such as Firefox's omni.ja,
 * Chromium's .pak files, fonts) are mapped through libc's mmap. la_objopen
 * asks ld.so to show the module every binding to the base namespace's libc,
 * and la_symbind64 binds the names mmap and mmap64 to advising_mmap, which
 * calls libc's own mmap with the same arguments, returns what it returned,
 * and advises the new mapping the same way when it is a non-executable
 * mapping of a planned file.
 *
 * It must never change what the program does, so:
 * - it defines no PLT hook (la_pltenter, la_pltexit), so ld.so keeps its
 *   ordinary lazy-binding trampoline (glibc 2.35 and later), and binds every
 *   symbol but those two names to what ld.so found;
 * - it is freestanding (raw syscalls, no libc, no DT_NEEDED): ld.so loads no
 *   second libc into the audit namespace; the wrapper touches no errno and
 *   no thread-local state;
 * - every failure (no list, no /proc, a refused syscall) leaves the object or
 *   the mapping as it was, silently.
 *
 * The list of planned files comes from the file named by
 * COLDSTART_NO_READ_AROUND_FILES: canonical paths, each ended by '\n'. */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#define LIST_VARIABLE "COLDSTART_NO_READ_AROUND_FILES="
#define LIST_CAPACITY (256 * 1024)
#define PAGE 4096UL

#if defined(__x86_64__)
#define NR_READ 0
#define NR_CLOSE 3
#define NR_MADVISE 28
#define NR_OPENAT 257
#define NR_READLINKAT 267
#define NR_MMAP 9
#define NR_MUNMAP 11
static long syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#elif defined(__aarch64__)
#define NR_READ 63
#define NR_CLOSE 57
#define NR_MADVISE 233
#define NR_OPENAT 56
#define NR_READLINKAT 78
#define NR_MMAP 222
#define NR_MUNMAP 215
static long syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;
	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	return x0;
}
#else
#error "no syscall convention for this architecture"
#endif

#define AT_FDCWD_ (-100)
#define PROT_EXEC_ 4
#define MAP_ANONYMOUS_ 0x20 /* the same on x86_64 and aarch64 */
#define MAP_FAILED_ ((void *)-1)
#define O_RDONLY_CLOEXEC (0 | 02000000 | 0400) /* O_RDONLY | O_CLOEXEC | O_NOCTTY */
#define MADV_RANDOM_ 1

/* The planned paths, '\n'-separated; empty when there is no list. */
static char list[LIST_CAPACITY];
static long list_length;

static int starts_with(const char *s, const char *prefix)
{
	while (*prefix)
		if (*s++ != *prefix++)
			return 0;
	return 1;
}

/* Reads the list named in the environment. glibc runs an audit module's
 * initializers with (argc, argv, envp) before it calls la_version. */
__attribute__((constructor)) static void read_list(int argc, char **argv, char **envp)
{
	(void)argc;
	(void)argv;
	if (!envp)
		return;
	const char *path = 0;
	for (char **entry = envp; *entry; entry++)
		if (starts_with(*entry, LIST_VARIABLE))
			path = *entry + sizeof(LIST_VARIABLE) - 1;
	if (!path)
		return;
	long fd = syscall6(NR_OPENAT, AT_FDCWD_, (long)path, O_RDONLY_CLOEXEC, 0, 0, 0);
	if (fd < 0)
		return;
	long length = 0;
	for (;;) {
		long got = syscall6(NR_READ, fd, (long)(list + length), LIST_CAPACITY - length, 0, 0, 0);
		if (got <= 0)
			break;
		length += got;
		if (length == LIST_CAPACITY) {
			/* Too long to hold whole: use none of it rather than part. */
			length = 0;
			break;
		}
	}
	syscall6(NR_CLOSE, fd, 0, 0, 0, 0, 0);
	list_length = length;
}

unsigned int la_version(unsigned int version)
{
	/* Version 1 has everything used here; ld.so rejects a newer one. */
	return version < 1 ? 0 : 1;
}

static int listed(const char *path, long length)
{
	long at = 0;
	while (at < list_length) {
		long end = at;
		while (end < list_length && list[end] != '\n')
			end++;
		if (end - at == length) {
			long i = 0;
			while (i < length && list[at + i] == path[i])
				i++;
			if (i == length)
				return 1;
		}
		at = end + 1;
	}
	return 0;
}

/* The canonical path of an open file, from /proc/self/fd; its length or -1. */
static long path_of(long fd, char *path, long size)
{
	/* Built by hand: an initialized array could become a memcpy call,
	 * and there is no libc to provide one. */
	static const char prefix[] = "/proc/self/fd/";
	char link[32];
	long at = 0;
	while (prefix[at]) {
		link[at] = prefix[at];
		at++;
	}
	char digits[20];
	long n = 0;
	do {
		digits[n++] = (char)('0' + fd % 10);
		fd /= 10;
	} while (fd > 0);
	while (n > 0)
		link[at++] = digits[--n];
	link[at] = 0;
	long length = syscall6(NR_READLINKAT, AT_FDCWD_, (long)link, (long)path, size, 0, 0);
	return length > 0 && length < size ? length : -1;
}

/* Advises the non-executable PT_LOAD segments of the object open at `fd`,
 * loaded with bias `base`. The headers are read through a mapping of the
 * file's first page, itself advised first: read(2) on a fresh descriptor
 * would find ld.so's readahead marker there and read ahead further. */
static void advise_segments(long fd, uintptr_t base)
{
	long page = syscall6(NR_MMAP, 0, PAGE, 1 /* PROT_READ */, 2 /* MAP_PRIVATE */, fd, 0);
	if (page < 0 && page > -4096)
		return;
	syscall6(NR_MADVISE, page, PAGE, MADV_RANDOM_, 0, 0, 0);
	const ElfW(Ehdr) *header = (const ElfW(Ehdr) *)page;
	if (header->e_ident[EI_MAG0] == ELFMAG0 && header->e_ident[EI_MAG1] == ELFMAG1 &&
	    header->e_ident[EI_MAG2] == ELFMAG2 && header->e_ident[EI_MAG3] == ELFMAG3 &&
	    header->e_phentsize == sizeof(ElfW(Phdr)) &&
	    header->e_phoff + (uint64_t)header->e_phnum * sizeof(ElfW(Phdr)) <= PAGE) {
		const ElfW(Phdr) *phdrs = (const ElfW(Phdr) *)(page + (long)header->e_phoff);
		for (int i = 0; i < header->e_phnum; i++) {
			const ElfW(Phdr) *segment = &phdrs[i];
			if (segment->p_type != PT_LOAD || (segment->p_flags & PF_X) ||
			    segment->p_filesz == 0)
				continue;
			/* The file-backed pages only: past p_filesz is anonymous. */
			uintptr_t start = (base + segment->p_vaddr) & ~(PAGE - 1);
			uintptr_t end =
				(base + segment->p_vaddr + segment->p_filesz + PAGE - 1) & ~(PAGE - 1);
			syscall6(NR_MADVISE, (long)start, (long)(end - start), MADV_RANDOM_, 0, 0, 0);
		}
	}
	syscall6(NR_MUNMAP, page, PAGE, 0, 0, 0, 0);
}

/* libc's mmap in the base namespace, as ld.so bound it; set before the
 * first call of the wrapper can happen, by the binding that leads to it. */
typedef void *(*mmap_function)(void *, unsigned long, int, int, int, long);
static mmap_function libc_mmap;

/* What la_objopen puts in the base namespace libc's cookie, to know it in
 * la_symbind64. */
static char libc_mark;

/* Maps as libc's mmap does; then, for a non-executable mapping of a planned
 * file, marks it MADV_RANDOM. */
static void *advising_mmap(void *address, unsigned long length, int protection, int flags,
			   int fd, long offset)
{
	mmap_function mmap = __atomic_load_n(&libc_mmap, __ATOMIC_ACQUIRE);
	void *mapped = mmap(address, length, protection, flags, fd, offset);
	if (mapped == MAP_FAILED_ || fd < 0 || (flags & MAP_ANONYMOUS_) ||
	    (protection & PROT_EXEC_))
		return mapped;
	char path[4096];
	long path_length = path_of(fd, path, sizeof path);
	if (path_length > 0 && listed(path, path_length))
		syscall6(NR_MADVISE, (long)mapped, (long)length, MADV_RANDOM_, 0, 0, 0);
	return mapped;
}

static int same(const char *a, const char *b)
{
	while (*a && *a == *b) {
		a++;
		b++;
	}
	return *a == *b;
}

/* Whether an object's name is glibc's libc.so.6, in whatever directory. */
static int is_libc(const char *name)
{
	const char *base = name;
	for (const char *at = name; *at; at++)
		if (*at == '/')
			base = at + 1;
	return same(base, "libc.so.6");
}

uintptr_t la_symbind64(Elf64_Sym *symbol, unsigned int index, uintptr_t *reference_cookie,
		       uintptr_t *definition_cookie, unsigned int *flags, const char *name)
{
	(void)index;
	(void)reference_cookie;
	(void)flags;
	if (definition_cookie && *definition_cookie == (uintptr_t)&libc_mark &&
	    (same(name, "mmap") || same(name, "mmap64"))) {
		__atomic_store_n(&libc_mmap, (mmap_function)symbol->st_value, __ATOMIC_RELEASE);
		return (uintptr_t)advising_mmap;
	}
	return symbol->st_value;
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
	if (list_length == 0)
		return 0;
	/* Every object's bindings to the base namespace's libc pass through
	 * la_symbind64. */
	unsigned int watch = LA_FLG_BINDFROM;
	if (lmid == LM_ID_BASE && map->l_name && is_libc(map->l_name)) {
		*cookie = (uintptr_t)&libc_mark;
		watch |= LA_FLG_BINDTO;
	}
	/* The main program has an empty name. */
	const char *name = map->l_name && map->l_name[0] ? map->l_name : "/proc/self/exe";
	long fd = syscall6(NR_OPENAT, AT_FDCWD_, (long)name, O_RDONLY_CLOEXEC, 0, 0, 0);
	if (fd < 0)
		return watch;
	char path[4096];
	long length = path_of(fd, path, sizeof path);
	if (length > 0 && listed(path, length))
		advise_segments(fd, map->l_addr);
	syscall6(NR_CLOSE, fd, 0, 0, 0, 0, 0);
	return watch;
}
