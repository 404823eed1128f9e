/* Looks up names in every way the name recorder must see, and prints each
   name's absolute path as it passed it (the test's oracle), one per line,
   "unreadable" for the name it passes from a page it never touched. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[4096];

static void said(const char *relative_to, const char *name) {
    if (name[0] == '/')
        printf("%s\n", name);
    else
        printf("%s/%s\n", relative_to, name);
}

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    snprintf(dir, sizeof dir, "%s", argv[1]);
    char path[4096], other[4096];
    struct stat st;

    snprintf(path, sizeof path, "%s/present", dir);
    int fd = open(path, O_RDONLY | O_CREAT, 0644);
    said("", path);
    close(fd);

    snprintf(path, sizeof path, "%s/absent-%d", dir, (int)getpid());
    stat(path, &st);
    said("", path);

    if (chdir(dir) != 0)
        return 3;
    said("", dir);
    access("present", R_OK);
    said(dir, "present");
    readlink("no-such-link", other, sizeof other);
    said(dir, "no-such-link");

    mkdir("sub", 0755);
    said(dir, "sub");
    int sub = open("sub", O_RDONLY | O_DIRECTORY);
    said(dir, "sub");
    snprintf(other, sizeof other, "%s/sub", dir);
    int inner = openat(sub, "inner", O_RDONLY | O_CREAT, 0644);
    said(other, "inner");
    close(inner);
    fstatat(sub, "inner", &st, AT_SYMLINK_NOFOLLOW);
    said(other, "inner");
    renameat(sub, "inner", AT_FDCWD, "moved");
    said(other, "inner");
    said(dir, "moved");
    unlink("moved");
    said(dir, "moved");
    close(sub);
    rmdir("sub");
    said(dir, "sub");

    /* A fresh anonymous page, never touched: not present, so the
       recorder's copy (which may not fault) fails; the kernel's own copy
       faults it in and reads an empty name. */
    char *untouched = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (untouched == MAP_FAILED)
        return 4;
    stat(untouched, &st);
    printf("unreadable\n");
    fflush(stdout);
    /* Relative names are resolved against /proc/PID while the process
       lives: stay a while, as a program's start does. */
    usleep(300 * 1000);
    return 0;
}
