/* Non-static global data. Under -fPIC these symbols are preemptible, so clang
 * reaches them through the GOT (x86_64 REX_GOTPCRELX, aarch64 ADR_GOT_PAGE, riscv64
 * GOT_HI20, loongarch64 GOT_PC_*, ppc64le TOC entries): the loader must build GOT
 * slots or relax them. One initialised (.data), one constant (.rodata), one
 * zero-initialised (.bss). */
#include <stdint.h>

int32_t elfjit_calls = 10;
float elfjit_scale[4] = {1.0f, 2.0f, 0.5f, -1.0f};
const int32_t elfjit_offsets[4] = {100, 200, 300, 400};
int64_t elfjit_accum;

int32_t global_data_got(const float *x, float *out, int n) {
    elfjit_calls++;
    for (int i = 0; i < n; i++) {
        out[i] = x[i] * elfjit_scale[i & 3] + (float)elfjit_offsets[i & 3];
        elfjit_accum += elfjit_offsets[i & 3];
        elfjit_scale[i & 3] += 1.0f;
    }
    return elfjit_calls * 1000 + (int32_t)(elfjit_accum % 1000);
}
