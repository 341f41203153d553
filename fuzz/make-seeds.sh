#!/usr/bin/env bash
# Regenerates seeds/: real clang-19 objects of every architecture for a few corpus kernels,
# the starting point of the structure-aware fuzz target. Committed, so fuzzing needs no clang.
set -euo pipefail
cd "$(dirname "$0")"
kernels=(softmax_expf crc32_lut string_table data_bss_state static_helpers switch_jumptable
         struct_memcpy int128_div global_data_got dispatch_table)
flags=(-c -fPIC -ffreestanding -nostdlib -fno-ident -fno-math-errno -fno-stack-protector -x c)
rm -f seeds/*.o
for arch in x86_64 aarch64 riscv64 loongarch64 powerpc64le; do
    cpu=()
    case $arch in
        riscv64) cpu=(-march=rv64gc -mabi=lp64d) ;;
        powerpc64le) cpu=(-mcpu=pwr8) ;;
    esac
    for k in "${kernels[@]}"; do
        for opt in -O0 -O2; do
            clang-19 --target=$arch-none-unknown-elf "${cpu[@]}" "$opt" "${flags[@]}" \
                ../tests/kernels/$k.c -o "seeds/$arch-$k$opt.o"
        done
    done
done
ls seeds | wc -l
