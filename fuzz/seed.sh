#!/usr/bin/env bash
# Builds a seed corpus for the inspect fuzz target from small binaries made
# on the spot (gcc, ld) and the hand-laid-out test fixture, so the fuzzer
# starts from real ELF shapes: PIE, shared object, RELR, static, .o.
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
