#!/usr/bin/env bash
# Builds seed corpora from small binaries made on the spot, so the fuzzer
# starts from real ELF shapes. inspect: gcc/ld PIE, shared object, RELR,
# static, .o, PE, Mach-O and the hand-laid-out test fixture. pack: PIEs and
# shared objects with relative relocations and no RELR yet, linked by GNU ld
# and by lld (which lay out the version tables differently).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
corpus="$here/corpus/inspect"
mkdir -p "$corpus"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/a.cc" <<'CC'
#include <cstdio>
struct Base { virtual int f() { return 1; } virtual ~Base() {} };
struct Derived : Base { int f() override { return 2; } };
static Derived global;
int use(Base* b) { return b->f(); }
int main() { std::printf("%d\n", use(&global)); }
CC
g++ -O1 -c "$work/a.cc" -o "$corpus/object.o"
g++ -O1 "$work/a.cc" -o "$corpus/pie"
g++ -O1 -fPIC -shared "$work/a.cc" -o "$corpus/shared.so"
g++ -O1 -Wl,-z,pack-relative-relocs "$work/a.cc" -o "$corpus/pie-relr"
g++ -O1 -no-pie "$work/a.cc" -o "$corpus/no-pie"
strip -o "$corpus/pie-stripped" "$corpus/pie"
# PE: a DLL and an EXE with base relocations, exports and imports tables
# (mingw binutils); Mach-O: an object with __mod_init_func (llvm-mc).
cat > "$work/pe.s" <<'ASM'
    .text
    .globl start
start:
    movq table(%rip), %rax
    ret
    .globl exported
exported:
    ret
    .data
    .globl table
table:
    .quad start
    .quad exported
    .quad table
ASM
if command -v x86_64-w64-mingw32-as >/dev/null; then
    x86_64-w64-mingw32-as "$work/pe.s" -o "$work/pe.o"
    x86_64-w64-mingw32-ld -shared --dynamicbase --image-base=0x180000000 -e start \
        "$work/pe.o" -o "$corpus/seed.dll"
    x86_64-w64-mingw32-ld --dynamicbase -e start "$work/pe.o" -o "$corpus/seed.exe"
else
    echo "no PE seeds: apt-get install binutils-mingw-w64-x86-64" >&2
fi
cat > "$work/macho.s" <<'ASM'
    .text
    .globl _main
_main:
    movq _table(%rip), %rax
    ret
    .data
_table:
    .quad _main
    .section __DATA,__mod_init_func,mod_init_funcs
    .quad _main
ASM
if command -v llvm-mc >/dev/null; then
    llvm-mc -triple x86_64-apple-macos11 -filetype=obj "$work/macho.s" -o "$corpus/seed-macho.o"
else
    echo "no Mach-O seed: apt-get install llvm" >&2
fi
# The test fixture, with and without section headers.
(cd "$here/.." && cargo run -q -p coldstart-binary --example write_fixtures -- "$corpus")
ls -la "$corpus"

# pack: words holding addresses (relative relocations), a symbol from libc
# (a version need to extend), and without -z pack-relative-relocs.
pack="$here/corpus/pack"
mkdir -p "$pack"
cat > "$work/p.c" <<'C'
#include <stdio.h>
static int a, b, c;
int *table[] = { &a, &b, &c, &a, &b };
static const char *names[] = { "one", "two", "three" };
int shown(int i) { return puts(names[i % 3]) + *table[i % 5]; }
int main(void) { return shown(1) > 0 ? 0 : 1; }
C
gcc -O1 -fPIE -pie "$work/p.c" -o "$pack/gcc-pie"
gcc -O1 -fPIC -shared "$work/p.c" -o "$pack/gcc-shared.so"
gcc -O1 -fPIC -shared -nostdlib "$work/p.c" -o "$pack/gcc-nolibc.so"
# Without section headers (as sstrip leaves a file): header fields zeroed,
# the table cut off.
cp "$pack/gcc-shared.so" "$pack/gcc-no-sections.so"
shoff=$(od -An -t u8 -j 40 -N 8 "$pack/gcc-no-sections.so" | tr -d ' ')
head -c 8 /dev/zero | dd of="$pack/gcc-no-sections.so" bs=1 seek=40 conv=notrunc status=none
head -c 4 /dev/zero | dd of="$pack/gcc-no-sections.so" bs=1 seek=60 conv=notrunc status=none
truncate -s "$shoff" "$pack/gcc-no-sections.so"
# Enough relocations that packing frees whole pages: the cut, the split
# host segment and the moved program headers.
{
    echo "static int v[400];"
    echo "int *many[] = {"
    for i in $(seq 0 399); do echo "&v[$i],"; done
    echo "};"
    echo "int first(void) { return *many[0]; }"
} > "$work/many.c"
gcc -O1 -fPIC -shared "$work/many.c" -o "$pack/gcc-many.so"
lld=
for candidate in ld.lld ld.lld-19 ld.lld-18 ld.lld-17 ld.lld-16 ld.lld-15 ld.lld-14; do
    if command -v "$candidate" >/dev/null; then lld=$(command -v "$candidate"); break; fi
done
if [ -n "$lld" ] && command -v clang >/dev/null; then
    clang -O1 -fPIE -pie --ld-path="$lld" "$work/p.c" -o "$pack/lld-pie"
    clang -O1 -fPIC -shared --ld-path="$lld" "$work/p.c" -o "$pack/lld-shared.so"
    clang -O1 -fPIC -shared --ld-path="$lld" "$work/many.c" -o "$pack/lld-many.so"
else
    echo "no lld seeds for pack: apt-get install clang lld" >&2
fi
for seed in "$pack"/gcc-* "$pack"/lld-*; do
    if readelf -d "$seed" | grep -q '(RELR)'; then
        echo "$seed already has DT_RELR: this toolchain packs by default" >&2
        exit 1
    fi
done
ls -la "$pack"/gcc-* "$pack"/lld-*

# block_map: clang-19 builds with a basic-block address map, in each shape
# the reader handles (version 2, ranges, profile fields, ELF32, big-endian).
if command -v clang-19 >/dev/null; then
    blocks="$here/corpus/block_map"
    mkdir -p "$blocks"
    cat > "$work/b.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
__attribute__((noinline)) int work(int x) {
  if (__builtin_expect(x < 0, 0)) { fprintf(stderr, "negative %d\n", x); abort(); }
  int s = 0;
  for (int i = 0; i < x; i++) s += i * x;
  return s;
}
int main(int argc, char **argv) { (void)argv; return work(argc) & 1; }
C
    printf 'v1\nf work\nc 0 1 2\n' > "$work/clusters.txt"
    map="-O2 -fbasic-block-address-map"
    clang-19 $map -fPIE -pie "$work/b.c" -o "$blocks/pie"
    clang-19 $map -fPIC -shared -fuse-ld=lld "$work/b.c" -o "$blocks/shared.so"
    clang-19 $map -ffunction-sections -fbasic-block-sections=list="$work/clusters.txt" \
        -mllvm -pgo-analysis-map=func-entry-count,bb-freq,br-prob "$work/b.c" -o "$blocks/split-pgo"
    cat > "$work/bare.c" <<'C'
__attribute__((noinline)) int pick(int x) { return x > 2 ? x * 3 : x - 1; }
void _start(void) { volatile int v = pick(5); (void)v; for (;;) {} }
C
    for target in i386-linux-gnu aarch64_be-linux-gnu; do
        clang-19 $map --target=$target -nostdlib -static -fuse-ld=lld "$work/bare.c" \
            -o "$blocks/bare-$target"
    done
    ls -la "$blocks"
else
    echo "no block_map seeds: apt-get install clang-19 lld-19" >&2
fi
