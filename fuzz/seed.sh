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
# The test fixture, with and without section headers.
(cd "$here/.." && cargo run -q -p coldstart-binary --example write_fixtures -- "$corpus")
ls -la "$corpus"
