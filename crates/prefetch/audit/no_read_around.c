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
 * The program's own requests to read ahead in a planned file are left to the
 * plan as well: readahead(2), posix_fadvise(POSIX_FADV_WILLNEED) on a planned
 * file, and madvise(MADV_WILLNEED) inside a mapping of a planned file that
 * advising_mmap made, return success without asking the kernel. The kernel
 * caps each such call at the readahead size, so at a large read_ahead_kb
 * (Firefox asks for each of its libraries whole, and for omni.ja) they read
 * megabytes the start never touches. They are hints: with the arguments let
 * through, the kernel's answer is success, so the answer is the same. Other
 * advice, other files and anything the module cannot vouch for go to libc.
 * A mapping is forgotten when munmap through the PLT removes it; one removed
 * otherwise (a GOT-bound munmap, MAP_FIXED, mremap) is remembered until its
 * slot is reused, and a WILLNEED on whatever is mapped there then is dropped
 * too (docs/no-read-around.md).
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
#define NR_FCNTL 72
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
#define NR_FCNTL 25
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
#define MADV_WILLNEED_ 3
#define POSIX_FADV_WILLNEED_ 3 /* the same on x86_64 and aarch64 */
#define F_GETFL_ 3
#define O_ACCMODE_ 3
#define O_WRONLY_ 1
#define O_PATH_ 010000000

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

/* libc's functions in the base namespace, as ld.so bound them, by address;
 * each is set before the first call of its wrapper can happen, by the
 * binding that leads to it (the table `wrapped`, below). */
static uintptr_t libc_mmap, libc_munmap, libc_readahead, libc_posix_fadvise, libc_madvise;
typedef void *(*mmap_function)(void *, unsigned long, int, int, int, long);
typedef int (*munmap_function)(void *, unsigned long);
typedef long (*readahead_function)(int, long, unsigned long);
typedef int (*fadvise_function)(int, long, long, int);
typedef int (*madvise_function)(void *, unsigned long, int);
#define LIBC(function, type) ((type)__atomic_load_n(&libc_##function, __ATOMIC_ACQUIRE))

/* The mappings of planned files advising_mmap advised, [start, end) page
 * ranges, in slots reused round-robin; a free slot has end 0. A writer
 * clears end, then sets start, then end; a reader takes a slot only when it
 * reads the same end before and after start. */
#define MAPPINGS 256
static uintptr_t mapping_start[MAPPINGS];
static uintptr_t mapping_end[MAPPINGS];
static unsigned int mapping_next;

static void remember_mapping(uintptr_t start, uintptr_t end)
{
	unsigned int slot = __atomic_fetch_add(&mapping_next, 1, __ATOMIC_RELAXED) % MAPPINGS;
	__atomic_store_n(&mapping_end[slot], 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&mapping_start[slot], start, __ATOMIC_SEQ_CST);
	__atomic_store_n(&mapping_end[slot], end, __ATOMIC_SEQ_CST);
}

/* Whether [start, end) lies inside one remembered mapping. */
static int within_mapping(uintptr_t start, uintptr_t end)
{
	for (int slot = 0; slot < MAPPINGS; slot++) {
		uintptr_t before = __atomic_load_n(&mapping_end[slot], __ATOMIC_SEQ_CST);
		uintptr_t first = __atomic_load_n(&mapping_start[slot], __ATOMIC_SEQ_CST);
		uintptr_t after = __atomic_load_n(&mapping_end[slot], __ATOMIC_SEQ_CST);
		if (before != 0 && before == after && first <= start && end <= after)
			return 1;
	}
	return 0;
}

/* Forgets the remembered mappings that overlap [start, end). */
static void forget_mappings(uintptr_t start, uintptr_t end)
{
	for (int slot = 0; slot < MAPPINGS; slot++) {
		uintptr_t last = __atomic_load_n(&mapping_end[slot], __ATOMIC_SEQ_CST);
		uintptr_t first = __atomic_load_n(&mapping_start[slot], __ATOMIC_SEQ_CST);
		if (last != 0 && first < end && start < last)
			__atomic_compare_exchange_n(&mapping_end[slot], &last, 0, 0, __ATOMIC_SEQ_CST,
						    __ATOMIC_SEQ_CST);
	}
}

static uintptr_t page_end(uintptr_t start, unsigned long length)
{
	uintptr_t end = start + ((length + PAGE - 1) & ~(PAGE - 1));
	return end < start ? 0 : end;
}

/* What la_objopen puts in the base namespace libc's cookie, to know it in
 * la_symbind64. */
static char libc_mark;

/* Maps as libc's mmap does; then, for a non-executable mapping of a planned
 * file, marks it MADV_RANDOM. */
static void *advising_mmap(void *address, unsigned long length, int protection, int flags,
			   int fd, long offset)
{
	void *mapped = LIBC(mmap, mmap_function)(address, length, protection, flags, fd, offset);
	if (mapped == MAP_FAILED_ || fd < 0 || (flags & MAP_ANONYMOUS_) ||
	    (protection & PROT_EXEC_))
		return mapped;
	char path[4096];
	long path_length = path_of(fd, path, sizeof path);
	if (path_length > 0 && listed(path, path_length)) {
		syscall6(NR_MADVISE, (long)mapped, (long)length, MADV_RANDOM_, 0, 0, 0);
		uintptr_t end = page_end((uintptr_t)mapped, length);
		if (end)
			remember_mapping((uintptr_t)mapped, end);
	}
	return mapped;
}

/* Unmaps as libc's munmap does; a remembered mapping it removed is
 * forgotten. */
static int forgetting_munmap(void *address, unsigned long length)
{
	int result = LIBC(munmap, munmap_function)(address, length);
	uintptr_t end = page_end((uintptr_t)address, length);
	if (result == 0 && end)
		forget_mappings((uintptr_t)address, end);
	return result;
}

/* Whether `fd` is open on a planned file in a way that lets the kernel read
 * ahead through it: readable, and not an O_PATH descriptor (on which
 * readahead and fadvise fail with EBADF). */
static int planned_and_readable(int fd)
{
	if (fd < 0)
		return 0;
	char path[4096];
	long path_length = path_of(fd, path, sizeof path);
	if (path_length <= 0 || !listed(path, path_length))
		return 0;
	long flags = syscall6(NR_FCNTL, fd, F_GETFL_, 0, 0, 0, 0);
	return flags >= 0 && !(flags & O_PATH_) && (flags & O_ACCMODE_) != O_WRONLY_;
}

/* readahead(2) on a planned file succeeds without reading: the plan reads
 * what the start needs. */
static long planned_readahead(int fd, long offset, unsigned long count)
{
	if (offset >= 0 && planned_and_readable(fd))
		return 0;
	return LIBC(readahead, readahead_function)(fd, offset, count);
}

/* posix_fadvise(POSIX_FADV_WILLNEED) on a planned file succeeds without
 * reading; other advice goes to libc. posix_fadvise64 is the same function
 * on the 64-bit targets the module is built for. */
static int planned_posix_fadvise(int fd, long offset, long length, int advice)
{
	if (advice == POSIX_FADV_WILLNEED_ && offset >= 0 && length >= 0 &&
	    planned_and_readable(fd))
		return 0;
	return LIBC(posix_fadvise, fadvise_function)(fd, offset, length, advice);
}

/* madvise(MADV_WILLNEED) on a page-aligned range inside a remembered mapping
 * of a planned file succeeds without reading; anything else goes to libc. */
static int planned_madvise(void *address, unsigned long length, int advice)
{
	uintptr_t start = (uintptr_t)address;
	uintptr_t end = page_end(start, length);
	if (advice == MADV_WILLNEED_ && (start & (PAGE - 1)) == 0 && length > 0 && end &&
	    within_mapping(start, end))
		return 0;
	return LIBC(madvise, madvise_function)(address, length, advice);
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

/* The libc functions the module binds to its wrappers: where libc's own
 * address is kept, and the wrapper bound instead. */
static const struct {
	const char *name;
	uintptr_t *libc;
	uintptr_t wrapper;
} wrapped[] = {
	{"mmap", &libc_mmap, (uintptr_t)advising_mmap},
	{"mmap64", &libc_mmap, (uintptr_t)advising_mmap},
	{"munmap", &libc_munmap, (uintptr_t)forgetting_munmap},
	{"readahead", &libc_readahead, (uintptr_t)planned_readahead},
	{"posix_fadvise", &libc_posix_fadvise, (uintptr_t)planned_posix_fadvise},
	{"posix_fadvise64", &libc_posix_fadvise, (uintptr_t)planned_posix_fadvise},
	{"madvise", &libc_madvise, (uintptr_t)planned_madvise},
};

uintptr_t la_symbind64(Elf64_Sym *symbol, unsigned int index, uintptr_t *reference_cookie,
		       uintptr_t *definition_cookie, unsigned int *flags, const char *name)
{
	(void)index;
	(void)reference_cookie;
	(void)flags;
	if (!definition_cookie || *definition_cookie != (uintptr_t)&libc_mark)
		return symbol->st_value;
	for (unsigned long i = 0; i < sizeof wrapped / sizeof wrapped[0]; i++)
		if (same(name, wrapped[i].name)) {
			__atomic_store_n(wrapped[i].libc, symbol->st_value, __ATOMIC_RELEASE);
			return wrapped[i].wrapper;
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
